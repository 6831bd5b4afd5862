// The key's `call` field: the structure of the block's call (schema/key.md, "call").
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include "kiln/key.hpp"
#include "strict_json.hpp"

namespace kiln {

namespace {

using json = nlohmann::json;

constexpr std::size_t kMaxCallDepth = 32;
constexpr std::size_t kMaxCallNodes = 4096;
constexpr std::size_t kMaxCallBytes = 64 * 1024;

Error call_error(const std::string& path, std::string_view what) {
  return make_error(Errc::invalid_argument, "key." + path + ": " + std::string(what));
}

std::string member_path(const std::string& base, const std::string& name) {
  std::string shown;
  for (unsigned char c : name) shown += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  return base + "." + shown;
}

// Python's repr of the double a float constant's text spells ("0.50", "5e-1", "+1E-06",
// "1.0", "-0", "inf"), so that one value has one spelling (schema/key.md, "call"): the
// shortest digits that read back to the same double, written fixed when the decimal point
// falls within -4 < point <= 16 digits of them, else as d[.ddd]e+XX. nullopt for text that
// is no float, or one beyond double range.
std::optional<std::string> python_float_repr(std::string text) {
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  const bool neg = !text.empty() && text[0] == '-';
  const std::string mag = neg ? text.substr(1) : text;
  if (mag == "inf") return neg ? "-inf" : "inf";
  if (mag == "nan") return std::string("nan");
  if (mag.empty() || mag[0] == '+' || mag[0] == '-' || mag.find_first_not_of("0123456789.eE+-") != std::string::npos)
    return std::nullopt;
  double d = 0;
  auto [end, ec] = std::from_chars(mag.data(), mag.data() + mag.size(), d);
  if (ec != std::errc() || end != mag.data() + mag.size() || !std::isfinite(d)) return std::nullopt;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);  // shortest: "1.5e+16"
  const std::string sci(buf, r.ptr);
  const auto e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int point = std::stoi(sci.substr(e + 1)) + 1;  // digits[0] is at 10^(point-1)
  std::string out;
  if (d == 0) {
    out = "0.0";
  } else if (point > -4 && point <= 16) {
    if (point <= 0) out = "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
    else if (static_cast<std::size_t>(point) >= digits.size())
      out = digits + std::string(static_cast<std::size_t>(point) - digits.size(), '0') + ".0";
    else out = digits.substr(0, point) + "." + digits.substr(point);
  } else {
    const int exp = point - 1;
    out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + "e" + (exp < 0 ? "-" : "+") +
          (std::abs(exp) < 10 ? "0" : "") + std::to_string(std::abs(exp));
  }
  return (neg ? "-" : "") + out;
}

// Walks the tree in canonical traversal order (arrays in order, objects by key: nlohmann's
// object is a std::map, ordered by bytes), checking each node and counting tensor leaves.
class CallChecker {
 public:
  explicit CallChecker(std::size_t n_inputs) : n_inputs_(n_inputs) {}

  Status node(json& v, const std::string& path, std::size_t depth) {
    if (depth > kMaxCallDepth) return call_error(path, "is nested deeper than 32 levels");
    if (++nodes_ > kMaxCallNodes) return call_error("call", "has more than 4096 nodes");
    if (!v.is_object() || v.size() != 1) {
      return call_error(path, "must be one of {\"tensor\":i}, {\"tuple\":[..]}, {\"list\":[..]}, {\"dict\":{..}}, {\"const\":..}");
    }
    const std::string kind = v.begin().key();
    json& body = v.begin().value();
    const std::string p = path + "." + kind;
    if (kind == "tensor") {
      if (!body.is_number_integer()) return call_error(p, "must be an integer index into key.inputs");
      const auto want = leaves_;
      if (body.is_number_unsigned() ? body.get<std::uint64_t>() != want
                                    : body.get<std::int64_t>() != static_cast<std::int64_t>(want)) {
        return call_error(p, "is " + body.dump() + " but this is tensor leaf " + std::to_string(want) +
                                 " in canonical order (args in order, then kwargs and dict entries by name)");
      }
      if (want >= n_inputs_) {
        return call_error(p, "is " + body.dump() + " but key.inputs has " + std::to_string(n_inputs_) + " entries");
      }
      ++leaves_;
      return {};
    }
    if (kind == "tuple" || kind == "list") {
      if (!body.is_array()) return call_error(p, std::string("must be an array, got ") + body.type_name());
      for (std::size_t i = 0; i < body.size(); ++i) KILN_TRY(node(body[i], p + "[" + std::to_string(i) + "]", depth + 1));
      return {};
    }
    if (kind == "dict") {
      if (!body.is_object()) return call_error(p, std::string("must be an object, got ") + body.type_name());
      for (auto& [k, child] : body.items()) KILN_TRY(node(child, member_path(p, k), depth + 1));
      return {};
    }
    if (kind == "const") return constant(body, p);
    return call_error(member_path(path, kind), "is not a call node kind (tensor, tuple, list, dict, const)");
  }

  std::size_t leaves() const { return leaves_; }

 private:
  static Status constant(json& v, const std::string& path) {
    if (v.is_null() || v.is_boolean() || v.is_number_integer() || v.is_string()) return {};
    if (v.is_number_float()) return call_error(path, "a float constant is written {\"float\": \"<Python repr>\"}");
    if (v.is_object() && v.size() == 1 && v.contains("float") && v["float"].is_string()) {
      const auto r = v["float"].get<std::string>();
      auto repr = r.size() <= 64 ? python_float_repr(r) : std::nullopt;
      if (!repr) return call_error(path + ".float", "must be a Python float repr, e.g. \"0.5\", \"1e-06\", \"inf\", \"nan\"");
      v["float"] = *repr;  // one spelling per value
      return {};
    }
    return call_error(path, "must be null, a boolean, an integer, a string or {\"float\": \"<repr>\"}");
  }

  std::size_t n_inputs_;
  std::size_t nodes_ = 0;
  std::size_t leaves_ = 0;
};

}  // namespace

std::string positional_call(std::size_t n_inputs) {
  std::string out = "{\"args\":[";
  for (std::size_t i = 0; i < n_inputs; ++i) out += (i ? ",{\"tensor\":" : "{\"tensor\":") + std::to_string(i) + "}";
  return out + "],\"kwargs\":{}}";
}

Result<std::string> canonical_call(std::string_view text, std::size_t n_inputs) {
  if (text.empty()) return positional_call(n_inputs);
  if (text.size() > kMaxCallBytes) return call_error("call", "is longer than 64 KiB");
  auto parsed = detail::parse_strict_json(text, "key.call");
  if (!parsed) return std::move(parsed).error();
  json doc = std::move(*parsed);
  if (doc.is_null()) return positional_call(n_inputs);
  if (!doc.is_object()) return call_error("call", std::string("must be an object {\"args\":[..],\"kwargs\":{..}}, got ") + doc.type_name());
  for (const auto& [k, _] : doc.items()) {
    if (k != "args" && k != "kwargs") return call_error(member_path("call", k), "is not a call field (args, kwargs)");
  }
  json out = {{"args", doc.value("args", json::array())}, {"kwargs", doc.value("kwargs", json::object())}};
  if (!out["args"].is_array()) return call_error("call.args", std::string("must be an array, got ") + out["args"].type_name());
  if (!out["kwargs"].is_object()) return call_error("call.kwargs", std::string("must be an object, got ") + out["kwargs"].type_name());
  CallChecker check(n_inputs);
  for (std::size_t i = 0; i < out["args"].size(); ++i) {
    KILN_TRY(check.node(out["args"][i], "call.args[" + std::to_string(i) + "]", 1));
  }
  for (auto& [name, v] : out["kwargs"].items()) {
    if (name.empty()) return call_error("call.kwargs", "has an empty keyword name");
    KILN_TRY(check.node(v, member_path("call.kwargs", name), 1));
  }
  if (check.leaves() != n_inputs) {
    return call_error("call", "has " + std::to_string(check.leaves()) + " tensor leaves but key.inputs has " +
                                  std::to_string(n_inputs) + " entries");
  }
  std::string text_out;
  try {
    text_out = out.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception&) {
    return call_error("call", "is not valid UTF-8");
  }
  if (text_out.size() > kMaxCallBytes) return call_error("call", "is longer than 64 KiB");
  return text_out;
}

}  // namespace kiln
