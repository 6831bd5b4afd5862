// kiln/torch_cache/value.hpp — a value's bytes in memory, shared by whoever holds them: a
// SET's value on its way to the store (the connection's receive buffer itself, handed
// over rather than copied), a value kept in memory, a value on its way to a client.
//
// Thread safety: a Value is immutable once made; copies may be used on any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace kiln::torch_cache {

struct Value {
  // `bytes` stay valid while `keep` is held. No `keep`: no value (a miss); an empty value
  // that exists has a `keep` and no bytes.
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> keep;

  explicit operator bool() const { return keep != nullptr; }
  const std::byte* data() const { return bytes.data(); }
  std::size_t size() const { return bytes.size(); }

  // A value that owns `v`.
  static Value take(std::vector<std::byte> v) {
    auto owned = std::make_shared<const std::vector<std::byte>>(std::move(v));
    return Value{std::span<const std::byte>(owned->data(), owned->size()), owned};
  }
  // A value that owns a copy of `b` (small values: cheaper than holding a larger buffer).
  static Value copy_of(std::span<const std::byte> b) { return take(std::vector<std::byte>(b.begin(), b.end())); }
};

}  // namespace kiln::torch_cache
