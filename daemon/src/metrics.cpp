// Prometheus text rendering of kilnd's metrics.
#include "metrics.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string_view>
#include <utility>
#include <sstream>

#include "memory_trim.hpp"

namespace kiln::daemon {

namespace {
// The shortest plain decimal that reads back to `v` ("0.00005", not "5e-05" nor
// "5.0000000000000002e-05"): bucket bounds are label values a person types into queries,
// and other exporters (Prometheus' client libraries) write them so.
std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[400];  // a double's longest fixed form is under 330 characters
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return std::string(buf, r.ptr);
}

// One series of a histogram: its _bucket lines (cumulative, `le` in plain decimals), _sum
// and _count. `labels`: `op="get"` and the like, without braces; `per_bucket`: one count
// per bound, then +Inf, not cumulative.
void histogram_series(std::ostream& os, std::string_view name, const std::string& labels,
                      std::span<const double> bounds, std::span<const std::uint64_t> per_bucket, double sum,
                      std::uint64_t count) {
  std::uint64_t cum = 0;
  for (std::size_t b = 0; b <= bounds.size(); ++b) {
    cum += per_bucket[b];
    os << name << "_bucket{" << labels << ",le=\"" << (b < bounds.size() ? num(bounds[b]) : std::string("+Inf"))
       << "\"} " << cum << "\n";
  }
  os << name << "_sum{" << labels << "} " << num(sum) << "\n";
  os << name << "_count{" << labels << "} " << count << "\n";
}

// The process_* series every Prometheus exporter has (client_golang's names and units), from
// /proc/self: CPU time, memory, file descriptors, start time.
void render_process(std::ostream& os) {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command name, which may hold spaces: it ends at the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return;
  std::istringstream fields(stat.substr(close + 2));
  std::vector<std::string> f((std::istream_iterator<std::string>(fields)), std::istream_iterator<std::string>());
  if (f.size() < 22) return;  // f[0] is field 3 (state) of proc(5)
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;  // utime + stime
  double boot = 0;
  std::ifstream proc_stat("/proc/stat");
  for (std::string word; proc_stat >> word;)
    if (word == "btime") {
      proc_stat >> boot;
      break;
    }
  std::size_t fds = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++fds;
  struct rlimit lim {};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  auto one = [&](const char* name, const char* type, const char* help, double v) {
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << num(v) << "\n";
  };
  one("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", cpu);
  one("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", std::stod(f[21]) * page);
  one("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", std::stod(f[20]));
  one("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
      boot + std::stod(f[19]) / ticks);
  one("process_open_fds", "gauge", "Number of open file descriptors.", static_cast<double>(fds));
  one("process_max_fds", "gauge", "Maximum number of open file descriptors.",
      lim.rlim_cur == RLIM_INFINITY ? -1.0 : static_cast<double>(lim.rlim_cur));
}
}  // namespace

Metrics::Metrics() {
  client_memory.on_quiet(trim_heap_soon);
}

void Metrics::record_request(protocol::MsgType op, Errc outcome, double seconds) {
  auto o = static_cast<std::size_t>(op);
  auto c = static_cast<std::size_t>(outcome);
  if (o >= kOps || c >= kOutcomes) return;
  requests_[o][c].fetch_add(1, std::memory_order_relaxed);
  std::size_t b = 0;
  while (b < kBuckets.size() && seconds > kBuckets[b]) ++b;
  latency_buckets_[o][b].fetch_add(1, std::memory_order_relaxed);
  latency_count_[o].fetch_add(1, std::memory_order_relaxed);
  double cur = latency_sum_[o].load(std::memory_order_relaxed);
  while (!latency_sum_[o].compare_exchange_weak(cur, cur + seconds, std::memory_order_relaxed)) {
  }
}

void Metrics::record_get(bool hit, bool hot) {
  (hit ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
  if (hot) hot_hits_.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t Metrics::requests() const {
  std::uint64_t n = 0;
  for (const auto& op : requests_)
    for (const auto& c : op) n += c.load(std::memory_order_relaxed);
  return n;
}

std::string Metrics::render(const std::vector<Gauge>& gauges, const std::vector<protocol::BuildSeconds>* builds) const {
  std::ostringstream os;
  os << "# HELP kiln_requests_total Requests answered, by operation and outcome (an errc name or ok).\n"
        "# TYPE kiln_requests_total counter\n";
  for (std::size_t o = 0; o < kOps; ++o) {
    auto op = static_cast<protocol::MsgType>(o);
    if (!protocol::is_request_type(op)) continue;
    for (std::size_t c = 0; c < kOutcomes; ++c) {
      auto n = requests_[o][c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      os << "kiln_requests_total{op=\"" << protocol::op_name(op) << "\",outcome=\""
         << errc_name(static_cast<Errc>(c)) << "\"} " << n << "\n";
    }
  }
  os << "# HELP kiln_request_duration_seconds Time from a request's frame to its reply.\n"
        "# TYPE kiln_request_duration_seconds histogram\n";
  for (std::size_t o = 0; o < kOps; ++o) {
    auto op = static_cast<protocol::MsgType>(o);
    auto count = latency_count_[o].load(std::memory_order_relaxed);
    if (!protocol::is_request_type(op) || count == 0) continue;
    std::array<std::uint64_t, kBuckets.size() + 1> per_bucket{};
    for (std::size_t b = 0; b < per_bucket.size(); ++b) per_bucket[b] = latency_buckets_[o][b].load(std::memory_order_relaxed);
    histogram_series(os, "kiln_request_duration_seconds", "op=\"" + std::string(protocol::op_name(op)) + "\"", kBuckets,
                     per_bucket, latency_sum_[o].load(std::memory_order_relaxed), count);
  }
  if (builds) {
    os << "# HELP kiln_build_duration_seconds Builds this node's worker ran, from their start on a build slot to "
          "their artifact stored (or their failure), by key kind and outcome.\n"
          "# TYPE kiln_build_duration_seconds histogram\n";
    for (const auto& b : *builds)
      histogram_series(os, "kiln_build_duration_seconds", "kind=\"" + b.kind + "\",outcome=\"" + b.outcome + "\"",
                       protocol::kBuildSecondsBounds, b.buckets, b.sum, b.count);
  }
  auto counter = [&](const char* name, const char* help, const Counter& c) {
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n"
       << name << " " << c.load(std::memory_order_relaxed) << "\n";
  };
  counter("kiln_get_hits_total", "GET requests answered with an artifact.", hits_);
  counter("kiln_get_misses_total", "GET requests for an artifact that is not stored.", misses_);
  counter("kiln_get_hot_hits_total", "Hits served from the hot set of uncompressed copies.", hot_hits_);
  counter("kiln_bytes_served_total", "Uncompressed artifact bytes handed over (descriptor or stream).", bytes_served_);
  counter("kiln_connections_total", "Connections accepted.", connections_total_);
  counter("kiln_connections_refused_total", "Connections refused (limit reached or no role).", connections_refused_);
  counter("kiln_connections_evicted_total",
          "Connections closed at limits.max_connections to let a new one in: the one waiting on its peer the longest "
          "(a stalled request or reply first, then an idle torch cache connection).",
          connections_evicted_);
  os << "# HELP kiln_client_memory_bytes Bytes held on behalf of clients: requests being received past each "
        "connection's 64 KiB buffer, kiln frame bodies, replies waiting to be written.\n"
        "# TYPE kiln_client_memory_bytes gauge\nkiln_client_memory_bytes "
     << client_memory.used() << "\n";
  os << "# HELP kiln_client_memory_limit_bytes limits.client_memory (0 = none).\n"
        "# TYPE kiln_client_memory_limit_bytes gauge\nkiln_client_memory_limit_bytes "
     << client_memory.limit() << "\n";
  os << "# HELP kiln_client_memory_refused_total Requests refused because they did not fit in limits.client_memory.\n"
        "# TYPE kiln_client_memory_refused_total counter\nkiln_client_memory_refused_total "
     << client_memory.refused() << "\n";
  counter("kiln_protocol_errors_total", "Connections closed for a malformed frame.", protocol_errors_);
  os << "# HELP kiln_torch_cache_requests_total torch.compile cache (Redis protocol) GET and SET, by outcome.\n"
        "# TYPE kiln_torch_cache_requests_total counter\n";
  static constexpr const char* kTorchOps[][2] = {{"get", "hit"},        {"get", "miss"}, {"set", "stored"},
                                                 {"set", "kept"},       {"set", "condition"}};
  for (std::size_t i = 0; i < 5; ++i)
    os << "kiln_torch_cache_requests_total{op=\"" << kTorchOps[i][0] << "\",outcome=\"" << kTorchOps[i][1] << "\"} "
       << torch_[i].load(std::memory_order_relaxed) << "\n";
  counter("kiln_torch_cache_closed_total",
          "torch.compile cache connections kilnd closed (refused role, bad request, timeout, store error).",
          torch_[static_cast<std::size_t>(TorchOp::closed_on_error)]);
  os << "# HELP kiln_torch_cache_late_total torch.compile cache requests the store (or, deferred, the queue) could "
        "not serve within torch_cache.reply_timeout_ms: a GET answered as a miss, a SET by closing its connection.\n"
        "# TYPE kiln_torch_cache_late_total counter\n"
     << "kiln_torch_cache_late_total{op=\"get\"} " << torch_[static_cast<std::size_t>(TorchOp::late_get)].load(std::memory_order_relaxed)
     << "\nkiln_torch_cache_late_total{op=\"set\"} " << torch_[static_cast<std::size_t>(TorchOp::late_set)].load(std::memory_order_relaxed)
     << "\n";
  os << "# HELP kiln_torch_cache_fleet_lookups_total torch.compile cache GETs that missed on this node and asked the "
        "fleet's registry: pulled and served (hit), not there or refused (miss), not answered in time (late: answered "
        "as a miss; lookups pause for a while), or not asked during such a pause (skipped).\n"
        "# TYPE kiln_torch_cache_fleet_lookups_total counter\n";
  static constexpr std::pair<TorchOp, const char*> kFleet[] = {
      {TorchOp::fleet_hit, "hit"}, {TorchOp::fleet_miss, "miss"}, {TorchOp::fleet_late, "late"},
      {TorchOp::fleet_skipped, "skipped"}};
  for (const auto& [op, name] : kFleet)
    os << "kiln_torch_cache_fleet_lookups_total{outcome=\"" << name << "\"} "
       << torch_[static_cast<std::size_t>(op)].load(std::memory_order_relaxed) << "\n";
  os << "# HELP kiln_torch_cache_connections Open torch.compile cache connections.\n"
        "# TYPE kiln_torch_cache_connections gauge\nkiln_torch_cache_connections "
     << torch_connections_.load(std::memory_order_relaxed) << "\n";
  os << "# HELP kiln_connections Open client connections.\n# TYPE kiln_connections gauge\nkiln_connections "
     << connections_.load(std::memory_order_relaxed) << "\n";
  for (const auto& g : gauges) {
    os << "# HELP " << g.name << " " << g.help << "\n# TYPE " << g.name << " " << (g.counter ? "counter" : "gauge")
       << "\n" << g.name << " " << num(g.value) << "\n";
  }
  os << "# HELP kiln_build_info kilnd's version and wire protocol; always 1.\n# TYPE kiln_build_info gauge\n"
     << "kiln_build_info{version=\"" KILN_VERSION "\",protocol=\"" << static_cast<int>(protocol::kVersion) << "\"} 1\n";
  render_process(os);
  return os.str();
}

}  // namespace kiln::daemon
