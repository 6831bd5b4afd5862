"""The worker's check of a built package against eager (ops/workers/kiln_worker/signature.py,
`compare`): constant outputs such as SD3's last block's `(None, hidden_states)` pass when
eager returns the same constant, and fail, naming the output, when they differ."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "ops", "workers", "kiln_worker"))

import signature  # noqa: E402
from report import WorkerError  # noqa: E402


def test_a_none_output_that_eager_returns_too_is_no_error():
    t = torch.randn(2, 3)
    check = signature.compare([None, t], [None, t.clone()], "float32")
    assert check["passed"] and check["rel_err"] == 0.0 and check["outputs"] == 2


def test_a_constant_where_eager_has_a_tensor_fails_naming_the_output():
    t = torch.randn(2, 3)
    with pytest.raises(WorkerError, match="output 0"):
        signature.compare([None, t], [t, t], "float32")
    with pytest.raises(WorkerError, match="output 1"):
        signature.compare([t, 3], [t, 4], "float32")


def test_a_compiled_output_beyond_the_tolerance_fails():
    t = torch.ones(4)
    with pytest.raises(WorkerError, match="differs from eager"):
        signature.compare([t * 1.1], [t], "float32")
