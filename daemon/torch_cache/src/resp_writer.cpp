// RESP reply encoding (see resp_writer.hpp).
#include "kiln/torch_cache/resp_writer.hpp"

namespace kiln::torch_cache {

namespace {
void line(std::string& out, char type, std::string_view text) {
  out += type;
  out += text;
  out += "\r\n";
}
}  // namespace

void append_simple(std::string& out, std::string_view text) { line(out, '+', text); }

void append_error(std::string& out, std::string_view text) {
  std::string clean(text);
  for (char& c : clean)
    if (c == '\r' || c == '\n') c = ' ';
  line(out, '-', clean);
}

void append_integer(std::string& out, std::int64_t n) { line(out, ':', std::to_string(n)); }

void append_bulk(std::string& out, std::string_view bytes) {
  append_bulk_header(out, bytes.size());
  out += bytes;
  out += "\r\n";
}

void append_bulk_header(std::string& out, std::uint64_t size) { line(out, '$', std::to_string(size)); }

void append_null(std::string& out, Proto proto) { out += proto == Proto::resp3 ? "_\r\n" : "$-1\r\n"; }

void append_array_header(std::string& out, std::size_t n) { line(out, '*', std::to_string(n)); }

void append_map_header(std::string& out, Proto proto, std::size_t pairs) {
  if (proto == Proto::resp3) line(out, '%', std::to_string(pairs));
  else line(out, '*', std::to_string(2 * pairs));
}

}  // namespace kiln::torch_cache
