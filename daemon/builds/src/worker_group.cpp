// Recording a worker's process group and killing one a killed kilnd left. See worker_group.hpp.
#include "worker_group.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

namespace kiln::build {

namespace fs = std::filesystem;

std::optional<std::uint64_t> process_start_time(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  // Field 2 (comm) is in parentheses and may itself hold spaces or ')': fields after it
  // start after the LAST ')'. Field 3 is the first token there, so field 22 is the 20th.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::string tok;
  for (int field = 3; field <= 22; ++field)
    if (!(rest >> tok)) return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  if (ec != std::errc() || p != tok.data() + tok.size()) return std::nullopt;
  return v;
}

Status write_worker_group(const fs::path& job_dir, pid_t pgid) {
  auto start = process_start_time(pgid);
  if (!start) return make_error(Errc::not_found, "worker " + std::to_string(pgid) + " is gone before its group was recorded");
  const fs::path final_path = job_dir / kWorkerGroupFile;
  const fs::path tmp = job_dir / (std::string(kWorkerGroupFile) + ".tmp");
  const std::string text = std::to_string(pgid) + " " + std::to_string(*start) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error_from_errno(errno, "cannot write " + tmp.string());
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int write_errno = errno;
  ::close(fd);
  if (!written) {
    ::unlink(tmp.c_str());
    return error_from_errno(write_errno ? write_errno : EIO, "cannot write " + tmp.string());
  }
  // No fsync: the record only matters while this boot lasts (start times count from boot).
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return error_from_errno(e, "cannot rename " + tmp.string() + " to " + final_path.string());
  }
  return {};
}

namespace {

struct Record {
  pid_t pgid = 0;
  std::uint64_t start = 0;
};

std::optional<Record> read_record(const fs::path& job_dir) {
  std::ifstream in(job_dir / kWorkerGroupFile);
  if (!in) return std::nullopt;
  long long pgid = 0;
  unsigned long long start = 0;
  if (!(in >> pgid >> start)) return std::nullopt;
  // pgid 0 or 1 (or negative) would make kill(-pgid) hit our own group or everything.
  if (pgid <= 1 || pgid > 0x3fffffff) return std::nullopt;
  return Record{static_cast<pid_t>(pgid), start};
}

bool group_gone(pid_t pgid) { return ::kill(-pgid, 0) != 0 && errno == ESRCH; }

}  // namespace

LeftoverGroup kill_leftover_group(const fs::path& job_dir, std::chrono::milliseconds wait) {
  auto rec = read_record(job_dir);
  if (!rec) return LeftoverGroup::no_record;
  auto now_start = process_start_time(rec->pgid);
  if (!now_start) return LeftoverGroup::gone;
  if (*now_start != rec->start) return LeftoverGroup::reused;
  // The leader is the very process the record names, and it still leads its group
  // (a worker never calls setpgid/setsid itself; if it did, the group would be gone).
  if (::getpgid(rec->pgid) != rec->pgid) return LeftoverGroup::reused;
  ::kill(-rec->pgid, SIGKILL);
  spdlog::warn("builds: killed build worker group {} left by a previous kilnd ({})", rec->pgid, job_dir.string());
  const auto end = std::chrono::steady_clock::now() + wait;
  while (!group_gone(rec->pgid)) {
    if (std::chrono::steady_clock::now() >= end) {
      spdlog::warn("builds: build worker group {} still has members {} ms after SIGKILL (zombies nobody reaps?)",
                   rec->pgid, wait.count());
      return LeftoverGroup::lingering;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return LeftoverGroup::killed;
}

}  // namespace kiln::build
