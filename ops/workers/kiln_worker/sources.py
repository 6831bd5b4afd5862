"""The `hash` and `strip` ops (schema/worker-protocol.md): a source's model hash and
signature, and a weight-free copy of a source (schema/sources.md)."""
import model_hash
import signature
from report import WorkerError
from spelling import dtype_name


def describe_source(path):
    ep = signature.load_source(path, device=None)
    weights = signature.state_tensors(ep)
    inputs, call, _ = signature.call_signature(ep)
    return {
        "model_hash": model_hash.model_hash(ep),
        "inputs": inputs,
        "call": call,
        "weight_free": signature.is_weight_free(ep),
        "dtype": signature.weight_dtype(ep),
        "constants": [{"name": n, "shape": list(t.shape), "dtype": dtype_name(t.dtype)}
                      for n, t in sorted(weights.items())],
    }


def strip_source(path, output):
    """Writes a weight-free copy of the source at `path` to `output` (schema/sources.md)
    and describes it; its model hash is the original's (weights are not hashed)."""
    import torch

    ep = signature.load_source(path, device=None)
    before = model_hash.model_hash(ep)
    torch.export.save(signature.strip_weights(ep), output)
    out = describe_source(output)
    if out["model_hash"] != before:
        raise WorkerError(f"stripping the weights changed the model hash ({before} -> {out['model_hash']}); "
                          "not writing a source that would not match its original")
    return out
