// kiln/client/key_text.hpp — the short text form of an input signature entry, as typed
// on kilnctl's command line (--input) and accepted by the C API (kiln_key_add_input):
//
//   spec   := dtype ":" dims [ ":" layout ]
//   dims   := "" | "scalar" | dim ( "x" dim )*
//   dim    := N | MIN ".." MAX          (a dynamic range; 0 <= MIN <= MAX)
//
//   "bfloat16:1x4096x3072"   "float32:1..64x3072"   "int64:scalar"   "float16:2x8:strided"
//
// Reentrant; no I/O.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kiln/key.hpp"
#include "kiln/result.hpp"

namespace kiln::client {

// invalid_argument with a message naming the bad part ("dimension 2 'A' is not a number
// or a MIN..MAX range"). The dtype and layout are normalized like the JSON form's
// ("torch.float32" and "float" are "float32"); an unknown one is refused.
Result<TensorSpec> parse_tensor_spec(std::string_view text);
// The inverse; layout is written only when it is not "strided".
std::string format_tensor_spec(const TensorSpec& spec);

// Sets the key's string field `name` (its name in schema/key.md: "kind", "model_hash",
// "region", "gpu_arch", "gpu_name", "torch_version", "torch_git", "cuda_version",
// "triton_version", "platform", "machine", "cpu_isa", "dtype", "call", "compile_options").
// Values are normalized as the JSON form normalizes them (schema/key.md, "Canonical
// forms": "bf16" -> "bfloat16", "9.0" -> "sm_90"). invalid_argument for another name, a
// bad kind or dtype, compile_options that are not valid compile options, or a call that
// is not a JSON object. The call is checked against the inputs when the key is encoded.
Status set_key_field(Key& key, std::string_view name, std::string_view value);
// The names set_key_field accepts, in that order.
const std::vector<std::string_view>& settable_key_fields();

}  // namespace kiln::client
