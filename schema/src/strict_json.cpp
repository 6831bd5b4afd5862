// Strict JSON parsing with path-named errors. See strict_json.hpp.
#include "strict_json.hpp"

#include <cmath>
#include <optional>
#include <vector>

namespace kiln::detail {

namespace {

using json = nlohmann::json;

// A SAX handler that builds the document like nlohmann's own DOM parser, but knows where
// it is, so every refusal can name the field.
class StrictSax {
 public:
  explicit StrictSax(std::string root) : root_(std::move(root)) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool b) { return put(json(b)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t& lexeme) {
    // The lexer hands an integer that overflows 64 bits over as a double.
    if (lexeme.find_first_of(".eE") == std::string::npos) {
      return fail(here(), "integer " + lexeme + " does not fit in 64 bits");
    }
    if (!std::isfinite(v)) return fail(here(), "number " + lexeme + " is out of range");
    return put(json(v));
  }
  bool string(json::string_t& s) { return put(json(std::move(s))); }
  bool binary(json::binary_t&) { return fail(here(), "binary values are not JSON"); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    Frame& f = stack_.back();
    if (f.value.contains(k)) return fail(f.path + "." + printable(k), "duplicate key (each key may appear once)");
    f.pending = std::move(k);
    f.has_pending = true;
    return true;
  }
  bool parse_error(std::size_t position, const std::string& last_token, const json::exception& ex) {
    std::string what = ex.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."
    if (auto p = what.find(": "); p != std::string::npos && what.find("column") < p) what = what.substr(p + 2);
    std::string msg = "not valid JSON at byte " + std::to_string(position) + ": " + printable(what);
    if (!last_token.empty() && (last_token[0] == 'N' || last_token[0] == 'I' || last_token.rfind("-I", 0) == 0)) {
      msg += " (NaN and Infinity are not JSON numbers)";
    }
    return fail(here(), msg);
  }

  json take() { return std::move(result_); }
  std::optional<Error>& error() { return error_; }

 private:
  struct Frame {
    json value;
    std::string path;
    std::string pending;
    bool has_pending = false;
  };

  // Non-ASCII bytes are shown as '?': the text may be the invalid UTF-8 being reported.
  static std::string printable(std::string_view s) {
    std::string out;
    for (unsigned char c : s) out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
    return out;
  }

  std::string here() const {
    if (stack_.empty()) return root_;
    const Frame& f = stack_.back();
    if (f.value.is_array()) return f.path + "[" + std::to_string(f.value.size()) + "]";
    return f.has_pending ? f.path + "." + printable(f.pending) : f.path;
  }

  bool open(json empty) {
    std::string path = here();
    stack_.push_back(Frame{std::move(empty), std::move(path), {}, false});
    return true;
  }

  bool close() {
    json v = std::move(stack_.back().value);
    stack_.pop_back();
    return put(std::move(v));
  }

  bool put(json v) {
    if (stack_.empty()) {
      result_ = std::move(v);
      return true;
    }
    Frame& f = stack_.back();
    if (f.value.is_array()) {
      f.value.push_back(std::move(v));
    } else {
      f.value[f.pending] = std::move(v);
      f.has_pending = false;
    }
    return true;
  }

  bool fail(const std::string& path, const std::string& what) {
    if (!error_) error_ = make_error(Errc::invalid_argument, path + ": " + what);
    return false;
  }

  std::string root_;
  std::vector<Frame> stack_;
  json result_;
  std::optional<Error> error_;
};

}  // namespace

Result<json> parse_strict_json(std::string_view text, const std::string& root) {
  StrictSax sax(root);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &sax, json::input_format_t::json, /*strict=*/true);
  } catch (const json::exception& e) {
    return make_error(Errc::invalid_argument, root + ": not valid JSON: " + e.what());
  }
  if (sax.error()) return std::move(*sax.error());
  if (!ok) return make_error(Errc::invalid_argument, root + ": not valid JSON");
  return sax.take();
}

}  // namespace kiln::detail
