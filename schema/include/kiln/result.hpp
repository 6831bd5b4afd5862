// kiln/result.hpp — the error type and Result<T> every kiln call returns.
//
// A call that can fail returns Result<T>: either a value or an Error carrying a
// named code and a message a user can act on. "Not found" is not an error: calls
// that look something up return Result<std::optional<T>>.
// Exceptions are not used across library boundaries.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kiln {

// Stable numeric values: they cross the wire protocol (schema/protocol.md) and
// are kilnctl's exit-code basis. Append only.
enum class Errc : int {
  ok = 0,
  invalid_argument = 1,  // malformed key, bad option, bad request field
  not_found = 2,         // used only where absence is an error (e.g. delete of a missing key)
  corrupt = 3,           // stored bytes fail verification; never served
  io_error = 4,          // read/write/fsync/rename failed
  no_space = 5,          // disk full (ENOSPC/EDQUOT)
  quota_exceeded = 6,    // store past its hard limit: writes refused, reads go on
  read_only = 7,         // store folder or filesystem is read-only
  permission_denied = 8, // peer lacks the role for this operation
  protocol_error = 9,    // malformed frame or message
  unavailable = 10,      // daemon not running / connection lost
  timeout = 11,
  busy = 12,             // limit reached (connections, requests in flight)
  build_failed = 13,     // a build ran and failed (or failed recently: negative cache)
  no_source = 14,        // a miss with no registered source for the model hash
  unsupported = 15,      // e.g. version not spoken, no GPU for a build
  cancelled = 16,
  internal = 17,
};

std::string_view errc_name(Errc code) noexcept;

struct Error {
  Errc code = Errc::internal;
  std::string message;

  // "corrupt: blob 3fa2... digest mismatch"
  std::string to_string() const;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & { assert(has_value()); return std::get<0>(v_); }
  const T& value() const& { assert(has_value()); return std::get<0>(v_); }
  // By value, not T&&: `for (auto& x : *make_result())` must not dangle once the
  // temporary Result is gone (a prvalue extends its lifetime; an xvalue does not).
  T value() && { assert(has_value()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { assert(!has_value()); return std::get<1>(v_); }
  Error&& error() && { assert(!has_value()); return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)

  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const Error& error() const& { assert(!ok_); return err_; }
  Error&& error() && { assert(!ok_); return std::move(err_); }

 private:
  Error err_;
  bool ok_ = true;
};

using Status = Result<void>;

inline Error make_error(Errc code, std::string message) { return Error{code, std::move(message)}; }

// Errc from an errno value of a failed file operation (ENOSPC -> no_space, EROFS -> read_only, ...).
Errc errc_from_errno(int err) noexcept;
// Error for a failed system call: "<what>: <strerror(err)>".
Error error_from_errno(int err, std::string_view what);

}  // namespace kiln

// Propagate an error from an expression returning Result/Status.
#define KILN_TRY(expr)                                          \
  do {                                                          \
    auto kiln_try_result_ = (expr);                             \
    if (!kiln_try_result_) return std::move(kiln_try_result_).error(); \
  } while (0)
