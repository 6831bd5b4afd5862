// See status_progress.hpp.
#include "kilnctl/status_progress.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>

#include "kilnctl/byte_progress.hpp"

namespace kiln::ctl {

void run_with_status_progress(const Context& ctx, const std::function<void()>& request, const StatusLine& line) {
  if (!progress_on_terminal(ctx.json)) {
    request();
    return;
  }
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;  // guarded by mu
  std::thread worker([&] {
    request();
    std::lock_guard lock(mu);
    finished = true;
    cv.notify_one();
  });
  auto watcher = ctx.connect();
  bool drawn = false;
  for (;;) {
    {
      // Redraw every 250 ms; leave as soon as the request is done.
      std::unique_lock lock(mu);
      if (cv.wait_for(lock, std::chrono::milliseconds(250), [&] { return finished; })) break;
    }
    if (!watcher) continue;
    auto s = watcher->status();
    if (!s) continue;
    auto text = line(*s);
    if (!text) continue;
    ctx.err << "\r\x1b[2K" << *text << std::flush;
    drawn = true;
  }
  worker.join();
  if (drawn) ctx.err << "\r\x1b[2K" << std::flush;
}

std::optional<std::string> fleet_transfer_line(const client::DaemonStatus& status, const std::string& op) {
  if (status.fleet.empty()) return std::nullopt;
  auto f = nlohmann::json::parse(status.fleet, nullptr, false);
  if (!f.is_object() || !f.contains("transfer") || !f["transfer"].is_object()) return std::nullopt;
  const auto& t = f["transfer"];
  if (t.value("op", "") != op) return std::nullopt;
  const auto done = t.value("done", std::uint64_t{0}), total = t.value("total", std::uint64_t{0});
  const auto bytes = t.value("bytes", std::uint64_t{0});
  const char* verb = op == "push" ? "pushing" : op == "pull" ? "pulling" : "pruning";
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  std::string text = std::string(verb) + "  " + std::to_string(done) + " / " + std::to_string(total) + " artifacts";
  if (op != "prune") text += "   " + std::string(size);
  return text;
}

}  // namespace kiln::ctl
