// Internal helpers for messages.cpp: typed field reads from nlohmann::json that never
// throw and name the field that was wrong. Not installed.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/json_depth.hpp"  // json_depth_within
#include "kiln/key.hpp"
#include "kiln/protocol/messages.hpp"
#include "kiln/result.hpp"
#include "../strict_json.hpp"

namespace kiln::protocol::detail {

using json = nlohmann::json;

// Each conv() returns an empty string on success, else what was wrong.
inline std::string conv(const json& j, bool& out) {
  if (!j.is_boolean()) return "expected true or false";
  out = j.get<bool>();
  return {};
}
inline std::string conv(const json& j, std::string& out) {
  if (!j.is_string()) return "expected a string";
  out = j.get_ref<const std::string&>();
  return {};
}
inline std::string conv(const json& j, std::uint64_t& out) {
  if (!j.is_number_unsigned()) return "expected a non-negative integer";
  out = j.get<std::uint64_t>();
  return {};
}
inline std::string conv(const json& j, std::uint32_t& out) {
  if (!j.is_number_unsigned() || j.get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max())
    return "expected an integer in 0..4294967295";
  out = static_cast<std::uint32_t>(j.get<std::uint64_t>());
  return {};
}
inline std::string conv(const json& j, std::int64_t& out) {
  if (j.is_number_unsigned()) {
    if (j.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return "integer out of range";
    out = static_cast<std::int64_t>(j.get<std::uint64_t>());
    return {};
  }
  if (!j.is_number_integer()) return "expected an integer";
  out = j.get<std::int64_t>();
  return {};
}
inline std::string conv(const json& j, double& out) {
  if (!j.is_number()) return "expected a number";
  out = j.get<double>();
  if (!std::isfinite(out)) return "expected a finite number";
  return {};
}
inline std::string conv(const json& j, Digest& out) {
  if (!j.is_string()) return "expected 64 hex chars";
  auto d = Digest::from_hex(j.get_ref<const std::string&>());
  if (!d) return "expected 64 hex chars";
  out = *d;
  return {};
}
inline std::string conv(const json& j, Key& out) {
  if (!j.is_object()) return "expected a key object";
  auto k = Key::from_json(j.dump());
  if (!k) return k.error().message;
  out = std::move(*k);
  return {};
}
// Struct shapes, defined in messages.cpp (declared here so the templates below see them).
std::string conv(const json& j, ArtifactMeta& out);
std::string conv(const json& j, SourceMeta& out);
std::string conv(const json& j, PrewarmResult& out);
std::string conv(const json& j, BuildState& out);
std::string conv(const json& j, BuildLog& out);
std::string conv(const json& j, GpuEntry& out);
std::string conv(const json& j, BuildSlotEntry& out);
std::string conv(const json& j, FleetItem& out);

template <class T>
std::string conv(const json& j, std::vector<T>& out) {
  if (!j.is_array()) return "expected an array";
  out.clear();
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    T v{};
    if (auto why = conv(j[i], v); !why.empty()) return "[" + std::to_string(i) + "]: " + why;
    out.push_back(std::move(v));
  }
  return {};
}
template <class T>
std::string conv(const json& j, std::map<std::string, T>& out) {
  if (!j.is_object()) return "expected an object";
  out.clear();
  for (auto it = j.begin(); it != j.end(); ++it) {
    T v{};
    if (auto why = conv(it.value(), v); !why.empty()) return "." + it.key() + ": " + why;
    out.emplace(it.key(), std::move(v));
  }
  return {};
}
template <class T>
std::string conv(const json& j, std::optional<T>& out) {
  T v{};
  if (auto why = conv(j, v); !why.empty()) return why;
  out = std::move(v);
  return {};
}

// Reads fields of one JSON object, remembering the first error.
class In {
 public:
  In(const json& j, std::string ctx) : j_(j), ctx_(std::move(ctx)) {
    if (!j_.is_object()) err_ = make_error(Errc::invalid_argument, ctx_ + ": expected a JSON object");
  }
  template <class T>
  In& req(const char* name, T& out) {
    if (err_) return *this;
    auto it = j_.find(name);
    if (it == j_.end() || it->is_null()) {
      err_ = make_error(Errc::invalid_argument, ctx_ + "." + name + ": required field missing");
      return *this;
    }
    read(name, *it, out);
    return *this;
  }
  template <class T>
  In& opt(const char* name, T& out) {
    if (err_) return *this;
    auto it = j_.find(name);
    if (it == j_.end() || it->is_null()) return *this;
    read(name, *it, out);
    return *this;
  }
  bool has(const char* name) const { return j_.is_object() && j_.contains(name) && !j_.at(name).is_null(); }
  const json& at(const char* name) const { return j_.at(name); }
  const std::string& ctx() const { return ctx_; }
  void fail(std::string message) {
    if (!err_) err_ = make_error(Errc::invalid_argument, ctx_ + ": " + std::move(message));
  }
  void fail_from(const Error& e) {
    if (!err_) err_ = e;
  }
  const std::optional<Error>& error() const { return err_; }

 private:
  template <class T>
  void read(const char* name, const json& v, T& out) {
    if (auto why = conv(v, out); !why.empty())
      err_ = make_error(Errc::invalid_argument, ctx_ + "." + name + ": " + why);
  }
  const json& j_;
  std::string ctx_;
  std::optional<Error> err_;
};

// Parses a body; empty text is "{}". protocol_error when it is not JSON.
// Deepest nesting a message body may have. kiln's messages nest a few levels (a key's
// input signature inside a key inside a list); anything deeper is refused before parsing.
inline constexpr int kMaxJsonDepth = 64;

inline Result<json> parse_body(std::string_view text, std::string_view what) {
  if (text.empty()) return json::object();
  if (!json_depth_within(text, kMaxJsonDepth)) {
    return make_error(Errc::protocol_error, std::string(what) + ": body nests deeper than " +
                                                std::to_string(kMaxJsonDepth) + " levels");
  }
  // Strict, as a key is read everywhere (schema/protocol.md): a duplicate field or an
  // integer past 64 bits is refused naming where it is, never read as the last one or as a
  // double (two requests that differ would reach the same key).
  auto parsed = ::kiln::detail::parse_strict_json(text, std::string(what));
  if (!parsed) return make_error(Errc::protocol_error, std::move(parsed).error().message);
  json j = std::move(*parsed);
  if (!j.is_object()) return make_error(Errc::protocol_error, std::string(what) + ": body is not a JSON object");
  return j;
}

inline json key_json(const Key& key) {
  json j = json::parse(key.to_json(), nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

}  // namespace kiln::protocol::detail
