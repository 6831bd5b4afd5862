#include "kilnctl/output.hpp"

#include <ctime>
#include <iomanip>
#include <istream>
#include <ostream>
#include <sstream>

#include "kiln/client/key_text.hpp"

namespace kiln::ctl {

std::string format_bytes(std::uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  std::ostringstream ss;
  ss << std::fixed << std::setprecision(1) << v << " " << kUnits[unit];
  return ss.str();
}

std::string count_of(std::uint64_t n, const std::string& singular, const std::string& plural) {
  return std::to_string(n) + " " + (n == 1 ? singular : plural.empty() ? singular + "s" : plural);
}

std::string format_time(std::int64_t unix_seconds) {
  if (unix_seconds == 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string read_stream(std::istream& in) {
  std::string out;
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) out.append(buf, static_cast<std::size_t>(in.gcount()));
  return out;
}

void print_info(std::ostream& out, const client::ArtifactInfo& info) {
  auto line = [&](const std::string& name, const std::string& value) {
    out << std::left << std::setw(16) << name << value << "\n";
  };
  line("key_digest", info.key_digest.hex());
  for (const auto& [name, value] : info.key.fields()) {
    if (name == "inputs") continue;  // shown in the short form below
    line(name, value.empty() ? "-" : value);
  }
  std::string inputs;
  for (const auto& t : info.key.inputs) inputs += (inputs.empty() ? "" : " ") + client::format_tensor_spec(t);
  line("inputs", inputs.empty() ? "-" : inputs);
  line("blob_digest", info.blob_digest.hex());
  line("size", format_bytes(info.size) + " (" + std::to_string(info.size) + " bytes)");
  line("stored_size", format_bytes(info.stored_size));
  line("created_at", format_time(info.created_at));
  line("last_access", format_time(info.last_access));
  line("hits", std::to_string(info.hits));
  std::ostringstream bs;
  bs << std::fixed << std::setprecision(2) << info.build_seconds << " s";
  line("build_seconds", info.build_seconds > 0 ? bs.str() : "-");
  line("pinned", info.pinned ? "yes" : "no");
  if (!info.origin.empty()) line("origin", info.origin + (info.signer.empty() ? "" : " (signed by " + info.signer + ")"));
}

std::vector<std::pair<std::string, std::string>> gpu_status_lines(const client::DaemonStatus& s) {
  std::vector<std::pair<std::string, std::string>> out;
  if (s.gpus.empty())
    out.emplace_back("gpus", "none found: " + (s.gpu_note.empty() ? std::string("(no reason given)") : s.gpu_note));
  for (const auto& g : s.gpus)
    out.emplace_back("gpu " + std::to_string(g.index), g.name + ", " + g.arch + ", " + format_bytes(g.memory_bytes));
  for (const auto& b : s.build_slots)
    out.emplace_back("slot " + b.name, b.gpu_name + ", " + b.gpu_arch + ": " + std::to_string(b.running) +
                                           " running, " + std::to_string(b.queued) + " queued");
  out.emplace_back("can build", s.builds_unavailable.empty() ? "yes (a miss is built on this node)"
                                                             : "no: " + s.builds_unavailable);
  return out;
}

}  // namespace kiln::ctl
