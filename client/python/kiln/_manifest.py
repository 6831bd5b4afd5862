"""Prewarm manifests (schema/prewarm-manifest.md) written from keys a process or a node
already has, so that `kilnctl prewarm` on another node (or the fleet) builds exactly the
keys diffusers processes ask for.

write(keys, path, client) writes `path` and, beside it, `sources/kiln-fp-<fingerprint>.pt2`
(or `sources/<model hash>.pt2`): the weight-free sources kilnd holds for those keys, under
the names kiln.torch looks them up by (prewarm registers a source under its file name, and
kiln.torch maps a block's fingerprint to its model hash through the source named after
it). Node fields (GPU, toolchain, host) are left out: the target node fills in its own.
A key whose call holds None writes it as `{ const = { none = true } }` (TOML has no null).
"""
import json
import os
import re
import time

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")
NODE_FIELDS = ("gpu_arch", "gpu_name", "torch_version", "torch_git", "cuda_version", "triton_version", "platform",
               "machine", "cpu_isa")


def _key_name(k):
    return k if _BARE.match(k) else json.dumps(k)


def toml_value(v):
    """A JSON-like value as TOML (inline tables and arrays); None only where the caller
    rewrote it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"a manifest cannot hold the float {v!r}")
        text = repr(v)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{_key_name(str(k))} = {toml_value(x)}" for k, x in v.items()) + " }"
    if v is None:
        raise ValueError("a manifest cannot hold None outside a call's constants")
    raise ValueError(f"a manifest cannot hold a {type(v).__name__}")


def _call_for_toml(node):
    """The key's call with {"const": null} as {"const": {"none": true}}."""
    if isinstance(node, dict):
        if set(node) == {"const"} and node["const"] is None:
            return {"const": {"none": True}}
        return {k: _call_for_toml(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_call_for_toml(v) for v in node]
    return node


def write(keys, path, client, names=None, header=""):
    """Writes the manifest of `keys` (key dicts, format 2) to `path` and their sources
    under `<dir of path>/sources/`. names: {model hash: the source's registered name}
    (default: from the node's source listing). Returns {"keys": n, "sources": n}."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(os.path.join(folder, "sources"), exist_ok=True)
    if names is None:
        names = {s["model_hash"]: s.get("name") or "" for s in client.sources.list()}
    hashes = sorted({k["model_hash"] for k in keys})
    lines = [f"# {line}" for line in (header or "").splitlines()]
    lines += ["# schema/prewarm-manifest.md; `kilnctl prewarm THIS_FILE` (node fields are the target node's)",
              "format = 1", ""]
    source_names = {}
    for i, h in enumerate(hashes):
        name = names.get(h) or ""
        filename = name if name.endswith(".pt2") and "/" not in name else f"{h}.pt2"
        with client.sources.get(h) as src:
            data = src.read()
        tmp = os.path.join(folder, "sources", f".{filename}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(folder, "sources", filename))
        source_names[h] = f"source-{i}"
        lines += ["[[source]]", f"name = {toml_value(source_names[h])}",
                  f"path = {toml_value('sources/' + filename)}", f"model_hash = {toml_value(h)}", ""]
    seen = set()
    for k in keys:
        ident = json.dumps({f: v for f, v in k.items() if f not in NODE_FIELDS}, sort_keys=True)
        if ident in seen:
            continue
        seen.add(ident)
        inputs = [{"shape": list(i["shape"]), "dtype": i["dtype"]} for i in k["inputs"]]
        label = ", ".join(f"{i['dtype']}{list(i['shape'])}" for i in inputs)
        lines += ["[[build]]", f"source = {toml_value(source_names[k['model_hash']])}",
                  f"region = {toml_value(k['region'])}", f"kind = {toml_value(k['kind'])}",
                  f"dtype = {toml_value(k['dtype'])}",
                  f"compile_options = {toml_value(k.get('compile_options') or {})}",
                  "  [[build.signature]]", f"  name = {toml_value(label)}",
                  f"  inputs = {toml_value(inputs)}"]
        if k.get("call"):
            lines.append(f"  call = {toml_value(_call_for_toml(k['call']))}")
        lines.append("")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)
    return {"keys": len(seen), "sources": len(hashes)}


def from_node(client, path, region=None):
    """The manifest of everything the node holds for kiln.torch users: every stored key
    built from a source kiln.torch registered (named kiln-fp-<fingerprint>.pt2), optionally
    of one region (block class). For `python -m kiln manifest`."""
    names = {s["model_hash"]: s.get("name") or "" for s in client.sources.list()}
    ours = {h for h, n in names.items() if n.startswith("kiln-fp-")}
    filters = {"region": region} if region else None
    keys = [i["key"] for i in client.ls(filters) if (i.get("key") or {}).get("model_hash") in ours]
    header = f"written by python -m kiln manifest from the node's store, {time.strftime('%Y-%m-%d %H:%M:%S')}"
    return write(keys, path, client, names=names, header=header)
