"""The worker's call-structure helper (ops/workers/kiln_worker/call_structure.py): from a
torch.export in_spec to the key's `call` (schema/key.md) and back. Runs without torch: the
specs are stand-ins with the attributes torch's TreeSpec has (type, context, is_leaf(),
children())."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "ops", "workers", "kiln_worker"))

import call_structure as cs  # noqa: E402
from report import WorkerError  # noqa: E402


class Spec:
    def __init__(self, type_=None, children=(), context=None):
        self.type, self._children, self.context = type_, list(children), context

    def is_leaf(self):
        return self.type is None

    def children(self):
        return list(self._children)


LEAF = Spec()


def call_spec(args, kwargs):
    return Spec(tuple, [Spec(tuple, args), Spec(dict, list(kwargs.values()), list(kwargs.keys()))])


def flux_spec():
    # block(hidden_states=, temb=, image_rotary_emb=(cos, sin), joint_attention_kwargs=None),
    # kwargs in the order diffusers passes them (torch keeps insertion order).
    return call_spec([], {"hidden_states": LEAF, "temb": LEAF, "image_rotary_emb": Spec(tuple, [LEAF, LEAF]),
                          "joint_attention_kwargs": Spec(type(None))})


def tensors(n):
    return [("tensor", f"t{i}") for i in range(n)]


def test_kwargs_tuple_and_none_give_the_canonical_call_and_order():
    tree = cs.tree_from_spec(flux_spec(), tensors(4))
    call, order = cs.canonical(tree)
    assert call == {"args": [], "kwargs": {
        "hidden_states": {"tensor": 0},
        "image_rotary_emb": {"tuple": [{"tensor": 1}, {"tensor": 2}]},
        "joint_attention_kwargs": {"const": None},
        "temb": {"tensor": 3}}}
    # Flat (torch) order: hidden_states 0, temb 1, cos 2, sin 3.
    assert order == [0, 2, 3, 1]


def test_arguments_are_rebuilt_exactly_as_exported_and_flat_order_restored():
    call, order = cs.canonical(cs.tree_from_spec(flux_spec(), tensors(4)))
    canon = ["h", "cos", "sin", "temb"]
    args, kwargs = cs.build_arguments(call, canon)
    assert args == []
    assert kwargs == {"hidden_states": "h", "image_rotary_emb": ("cos", "sin"), "joint_attention_kwargs": None,
                      "temb": "temb"}
    assert cs.flat_order_of(canon, order) == ["h", "temb", "cos", "sin"]


def test_constants_lists_dicts_and_floats():
    spec = call_spec([LEAF, Spec(list, [LEAF, LEAF])], {"opts": Spec(dict, [LEAF, LEAF], ["z", "a"]), "scale": LEAF})
    leaves = [("tensor", 0), ("const", 3), ("tensor", 1), ("tensor", 2), ("const", "x"), ("const", 0.5)]
    call, order = cs.canonical(cs.tree_from_spec(spec, leaves))
    assert call == {"args": [{"tensor": 0}, {"list": [{"const": 3}, {"tensor": 1}]}],
                    "kwargs": {"opts": {"dict": {"a": {"const": "x"}, "z": {"tensor": 2}}},
                               "scale": {"const": {"float": "0.5"}}}}
    assert order == [0, 2, 3]
    args, kwargs = cs.build_arguments(call, ["A", "B", "C"])
    assert args == ["A", [3, "B"]] and kwargs == {"opts": {"a": "x", "z": "C"}, "scale": 0.5}


def test_a_structure_change_is_another_call():
    a, _ = cs.canonical(cs.tree_from_spec(flux_spec(), tensors(4)))
    flat = call_spec([], {"hidden_states": LEAF, "temb": LEAF, "cos": LEAF, "sin": LEAF,
                          "joint_attention_kwargs": Spec(type(None))})
    b, _ = cs.canonical(cs.tree_from_spec(flat, tensors(4)))
    assert a != b
    positional = call_spec([LEAF, LEAF, LEAF, LEAF], {})
    c, _ = cs.canonical(cs.tree_from_spec(positional, tensors(4)))
    assert c == cs.positional(4) and c != a


def test_unsupported_structures_are_refused_naming_where():
    class Point:
        pass
    with pytest.raises(WorkerError, match=r"call.*holds a Point"):
        cs.tree_from_spec(call_spec([Spec(Point, [LEAF])], {}), tensors(1))
    with pytest.raises(WorkerError, match="non-string keys"):
        cs.tree_from_spec(call_spec([Spec(dict, [LEAF], [1])], {}), tensors(1))
    with pytest.raises(WorkerError, match="leaves"):
        cs.tree_from_spec(call_spec([LEAF], {}), tensors(2))
    with pytest.raises(WorkerError, match="64 bits"):
        cs.canonical(cs.tree_from_spec(call_spec([LEAF], {}), [("const", 2**70)]))
