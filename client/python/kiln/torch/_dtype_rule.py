"""The key's `dtype` of a block: ONE rule, this file (schema/key.md, "dtype").

kiln.torch applies it to the block it hooks (kiln.torch._keys.block_dtype) and the build
worker to the exported program it builds (ops/workers/kiln_worker/key_dtype.py is this
file: a link in the source tree, a copy where it is installed). Both count the same
tensors: the block's parameters and buffers, persistent or not (in an exported program:
its state_dict and its non-persistent buffers).

A block may hold several floating dtypes: diffusers keeps `_keep_in_fp32_modules` in
float32 under `from_pretrained(torch_dtype=torch.bfloat16)`, and in Wan those modules
(norm1/2/3, scale_shift_table) sit inside every WanTransformerBlock. The key's dtype is
the one holding the most elements (the dtype the block computes in), ties to the name
that sorts first; with no floating parameter or buffer, the first floating input's dtype;
else "float32". Pure Python: no torch import, so the worker and the package share it as is.
"""


def key_dtype(element_counts, input_dtypes=()):
    """element_counts: {dtype name ("bfloat16"): elements of the floating parameters and
    buffers of that dtype}; input_dtypes: the call's floating input dtype names, in the
    key's input order. Returns the key's dtype name."""
    counts = {d: n for d, n in element_counts.items() if n > 0}
    if counts:
        return min(counts, key=lambda d: (-counts[d], d))
    for d in input_dtypes:
        return d
    return "float32"
