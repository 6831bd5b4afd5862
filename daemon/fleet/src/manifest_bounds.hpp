// Bounded work per manifest from the registry: a manifest is refused before it is parsed
// when it is larger than a kiln manifest could be or nested deeper than one is (a DOM of a
// deeply nested document costs far more memory than its bytes, and recursion), and after
// when it has more layers than allowed. Refusals are corrupt errors whose message starts
// with "over_limit:" (the fleet's refusal reason of that name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/oci/mapping.hpp"
#include "kiln/result.hpp"

namespace kiln::fleet {

// Largest manifest a pull reads (a kiln artifact or source manifest is about 2 KiB, a
// signature manifest about 1 KiB per signer).
constexpr std::uint64_t kMaxManifestBytes = 256u << 10;
// Deepest JSON nesting (objects and arrays) a manifest may have; kiln's go 4 deep.
constexpr std::size_t kMaxManifestDepth = 16;
// Most layers a signature manifest may have (one per builder that signed the artifact).
constexpr std::size_t kMaxSignatureLayers = 16;

// parse_manifest after the size and depth checks, then at most `max_layers` layers.
Result<oci::ParsedManifest> parse_bounded_manifest(std::string_view bytes, const std::string& where,
                                                   std::size_t max_layers);

// Whether an error is one of the refusals above.
bool is_over_limit(const Error& e) noexcept;

}  // namespace kiln::fleet
