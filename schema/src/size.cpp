#include "kiln/size.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace kiln {

Result<std::uint64_t> parse_size(std::string_view text) {
  const std::string s(text);
  auto bad = [&](const std::string& why) {
    return make_error(Errc::invalid_argument,
                      "'" + s + "' is not a size (" + why +
                          "): use bytes or a number with B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) or "
                          "KB, MB, GB, TB (powers of 1000), e.g. 4096, 512MiB, 10GB");
  };
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) return bad("no number");
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || !std::isfinite(v) || v < 0) return bad("number out of range");
  std::string unit(end);
  if (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  static constexpr const char* kPrefixes = "KMGT";
  for (int i = 0; i < 4; ++i) {
    const std::string p(1, kPrefixes[i]);
    if (unit == p || unit == p + "IB") mult = std::pow(1024.0, i + 1);
    if (unit == p + "B") mult = std::pow(1000.0, i + 1);
  }
  if (mult == 0) return bad("unknown unit '" + std::string(end) + "'");
  const double bytes = v * mult;
  if (bytes >= 18446744073709551616.0) return bad("more than 2^64 bytes");
  return static_cast<std::uint64_t>(std::llround(bytes));
}

}  // namespace kiln
