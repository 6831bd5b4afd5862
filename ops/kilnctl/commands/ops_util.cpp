#include "kilnctl/commands/ops_util.hpp"

#include <cmath>
#include <cstdlib>

namespace kiln::ctl {

namespace {

// Splits "12.5GiB" into 12.5 and "GiB"; false when there is no leading number.
bool split_number(std::string_view text, double& number, std::string& unit) {
  std::string s(text);
  char* end = nullptr;
  number = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(number) || number < 0) return false;
  unit = std::string(end);
  return true;
}

}  // namespace

Result<std::uint64_t> parse_age_seconds(std::string_view text) {
  double n = 0;
  std::string unit;
  const std::string help = "'" + std::string(text) + "' is not an age: use e.g. 90s, 30m, 12h, 7d, 2w";
  if (!split_number(text, n, unit)) return make_error(Errc::invalid_argument, help);
  double mul = 0;
  if (unit.empty() || unit == "s") mul = 1;
  if (unit == "m" || unit == "min") mul = 60;
  if (unit == "h") mul = 3600;
  if (unit == "d") mul = 86400;
  if (unit == "w") mul = 7 * 86400;
  if (mul == 0) return make_error(Errc::invalid_argument, help);
  return static_cast<std::uint64_t>(std::llround(n * mul));
}

Result<std::map<std::string, std::string>> parse_filters(const std::vector<std::string>& args) {
  std::map<std::string, std::string> out;
  for (const auto& f : args) {
    auto eq = f.find('=');
    if (eq == std::string::npos || eq == 0) {
      return make_error(Errc::invalid_argument, "--filter '" + f + "': expected FIELD=VALUE, e.g. region=FluxSingleStreamBlock");
    }
    out[f.substr(0, eq)] = f.substr(eq + 1);
  }
  return out;
}

}  // namespace kiln::ctl
