// kiln/aoti_metadata.hpp — what an AOTInductor package (.pt2, a zip archive) records about
// where it may run, and whether that agrees with a key; and the constant names kiln's
// worker records in it.
//
// torch writes `<name>/data/aotinductor/<model>/<hash>.wrapper_metadata.json` (and older
// packages `..._metadata.json`) with AOTI_PLATFORM (sys.platform), AOTI_MACHINE
// (platform.machine()), AOTI_CPU_ISA (the vector ISA, upper case) and
// AOTI_COMPUTE_CAPABILITY ("90"). kilnd checks them against the key on PUT, and the libtorch
// loader helper against its own process, so that no package runs where it was not built
// for (DESIGN.md: torch itself only warns). Pure functions, no I/O; reentrant.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "kiln/key.hpp"
#include "kiln/result.hpp"

namespace kiln {

// The metadata of the first AOTI metadata member of the zip archive `zip`. nullopt when
// `zip` is not a zip archive (also one whose central directory does not parse: torch
// could not open it either, and arbitrary bytes may contain a zip signature) or holds no
// AOTI metadata member. invalid_argument for a zip
// whose metadata member is damaged, compressed (torch stores members uncompressed) or not a
// JSON object of strings.
Result<std::optional<std::map<std::string, std::string>>> read_aoti_metadata(std::span<const std::byte> zip);

// OK when every host/GPU field the metadata records agrees with the key (compared in
// canonical spelling: "AVX512" is "avx512", "90" is "sm_90"); otherwise invalid_argument
// naming the field: "key.gpu_arch is sm_90 but the package was built for sm_89
// (AOTI_COMPUTE_CAPABILITY 89)". A field the metadata lacks or leaves empty is not checked.
Status check_aoti_metadata(const Key& key, const std::map<std::string, std::string>& metadata);

// {package constant: the block's attribute path} that kiln's build worker recorded in the
// package, `<root>/kiln/constant_names.json` (schema/worker-protocol.md, "aoti"): a block's
// plain tensor attribute (neither parameter nor buffer) is the package's
// `_tensor_constant<n>`, and a loader gives it that attribute's tensor. Empty when `zip` is
// no zip archive or records no names (every constant is then named as in the block).
// invalid_argument when the member is damaged, compressed, not a JSON object, or maps a
// constant to anything but a non-empty string.
Result<std::map<std::string, std::string>> read_aoti_constant_names(std::span<const std::byte> zip);

}  // namespace kiln
