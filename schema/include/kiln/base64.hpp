// kiln/base64.hpp — standard base64 (RFC 4648 §4, with '=' padding, no line breaks): the
// one codec for what kiln writes as base64 (ed25519 keys and signatures, HTTP Basic
// credentials, etcd's JSON gateway).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

std::string base64_encode(std::span<const std::byte> data);
// nullopt when `text` is not padded base64 (its length not a multiple of 4, or a character
// outside the alphabet).
std::optional<std::vector<std::byte>> base64_decode(std::string_view text);

}  // namespace kiln
