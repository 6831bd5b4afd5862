// kiln/torch_cache/resp_writer.hpp — replies of the Redis protocol, RESP2 or RESP3.
//
// Each function appends one reply (or one aggregate header) to `out`. The protocol
// version matters for the null (`$-1` in RESP2, `_` in RESP3: redis-py 8 after HELLO 3
// waits for `_` and hangs on `$-1`) and for maps (`%n` in RESP3, a flat array of 2n in
// RESP2). No I/O; thread safety: plain functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::torch_cache {

enum class Proto { resp2 = 2, resp3 = 3 };

void append_simple(std::string& out, std::string_view text);   // +OK
// -ERR ...: `text` starts with the error code ("ERR", "NOAUTH", ...); CR and LF in it
// are replaced by spaces so the reply stays one line.
void append_error(std::string& out, std::string_view text);
void append_integer(std::string& out, std::int64_t n);            // :n
void append_bulk(std::string& out, std::string_view bytes);       // $n\r\n...\r\n
// Only the header of a bulk string ($n\r\n): the bytes and the closing CRLF are sent
// after it by the caller (large values are written from where they lie, not copied).
void append_bulk_header(std::string& out, std::uint64_t size);
void append_null(std::string& out, Proto proto);                  // _ or $-1
void append_array_header(std::string& out, std::size_t n);        // *n
void append_map_header(std::string& out, Proto proto, std::size_t pairs);  // %n or *2n

}  // namespace kiln::torch_cache
