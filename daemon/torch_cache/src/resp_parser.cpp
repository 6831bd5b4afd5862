// RESP request parsing (see resp_parser.hpp).
#include "kiln/torch_cache/resp_parser.hpp"

#include <charconv>
#include <optional>

namespace kiln::torch_cache {

namespace {

using State = ParseResult::State;

ParseResult invalid(std::string why) {
  ParseResult r;
  r.state = State::invalid;
  r.error = std::move(why);
  return r;
}

ParseResult incomplete(std::size_t need) {
  ParseResult r;
  r.need = need;
  return r;
}

// The line starting at `pos` (without its "\r\n"), or npos for the end when none is
// complete yet. A lone "\n" ends a line too, as Redis accepts for inline commands.
std::size_t line_end(std::string_view buf, std::size_t pos) { return buf.find('\n', pos); }

// A non-negative decimal integer, or -1 (also for "-1" itself: the caller refuses it).
long long parse_count(std::string_view text) {
  if (text.empty() || text.size() > 18) return -1;
  long long v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0) return -1;
  return v;
}

ParseResult parse_inline(std::string_view buf, const ParserLimits& lim) {
  auto end = line_end(buf, 0);
  if (end == std::string_view::npos) {
    if (buf.size() > lim.max_inline_bytes) return invalid("inline command longer than " + std::to_string(lim.max_inline_bytes) + " bytes");
    return incomplete(buf.size() + 1);
  }
  if (end > lim.max_inline_bytes) return invalid("inline command longer than " + std::to_string(lim.max_inline_bytes) + " bytes");
  std::string_view line = buf.substr(0, end);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  ParseResult r;
  r.state = State::complete;
  r.consumed = end + 1;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i >= line.size()) break;
    if (line[i] == '"' || line[i] == '\'') return invalid("quoted inline arguments are not supported; send a RESP array");
    std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (r.args.size() >= lim.max_array_len) return invalid("more than " + std::to_string(lim.max_array_len) + " arguments");
    r.args.push_back(line.substr(start, i - start));
  }
  return r;
}

}  // namespace

ParseResult RequestParser::parse(std::string_view buf) const {
  if (buf.empty()) return incomplete(1);
  if (buf[0] != '*') return parse_inline(buf, limits_);

  std::size_t pos = 0;
  auto header = [&](char type, long long& count) -> std::optional<ParseResult> {
    auto end = line_end(buf, pos);
    if (end == std::string_view::npos) {
      if (buf.size() - pos > 32) return invalid(std::string("a '") + type + "' header line is too long");
      return incomplete(buf.size() + 1);
    }
    if (end == pos || buf[pos] != type)
      return invalid(std::string("expected '") + type + "' at byte " + std::to_string(pos));
    std::string_view text = buf.substr(pos + 1, end - pos - 1);
    if (text.empty() || text.back() != '\r') return invalid("header line not ended by CRLF");
    text.remove_suffix(1);
    count = parse_count(text);
    if (count < 0) return invalid(std::string("bad length '") + std::string(text.substr(0, 20)) + "' after '" + type + "'");
    pos = end + 1;
    return std::nullopt;
  };

  long long n = 0;
  if (auto r = header('*', n)) return std::move(*r);
  if (static_cast<unsigned long long>(n) > limits_.max_array_len)
    return invalid("request of " + std::to_string(n) + " arguments (at most " + std::to_string(limits_.max_array_len) + ")");
  ParseResult out;
  out.args.reserve(static_cast<std::size_t>(n));
  for (long long i = 0; i < n; ++i) {
    long long len = 0;
    if (auto r = header('$', len)) return std::move(*r);
    if (static_cast<unsigned long long>(len) > limits_.max_bulk_bytes)
      return invalid("argument of " + std::to_string(len) + " bytes (at most " + std::to_string(limits_.max_bulk_bytes) + ")");
    std::size_t ulen = static_cast<std::size_t>(len);
    if (buf.size() - pos < ulen + 2) return incomplete(pos + ulen + 2);
    if (buf[pos + ulen] != '\r' || buf[pos + ulen + 1] != '\n') return invalid("bulk string not ended by CRLF");
    out.args.push_back(buf.substr(pos, ulen));
    pos += ulen + 2;
  }
  out.state = State::complete;
  out.consumed = pos;
  return out;
}

}  // namespace kiln::torch_cache
