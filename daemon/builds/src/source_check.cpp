// Sources verified when they are registered. See source_check.hpp.
#include "source_check.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "kiln/builds/worker_protocol.hpp"
#include "kiln/posix/fd.hpp"

namespace kiln::build {

namespace fs = std::filesystem;

namespace {

// The file, removed when the check and any queued work on it are gone.
struct CheckFile {
  fs::path path;
  ~CheckFile() {
    std::error_code ec;
    if (!fs::remove(path, ec) && ec) spdlog::warn("builds: cannot remove the source check file {}: {}", path.string(), ec.message());
  }
};

class FileSourceCheck final : public daemon::SourceCheck {
 public:
  FileSourceCheck(std::shared_ptr<CheckFile> file, posix::UniqueFd fd, WorkerCommand worker,
                  std::chrono::milliseconds timeout, CheckQueue queue)
      : file_(std::move(file)), fd_(std::move(fd)), worker_(std::move(worker)), timeout_(timeout), queue_(std::move(queue)) {}

  Status write(std::span<const std::byte> data) override {
    if (!fd_.valid()) return make_error(Errc::invalid_argument, "source check: write after verify");
    if (int err = posix::write_all(fd_.get(), data.data(), data.size()); err != 0)
      return error_from_errno(err, "cannot write the source check file " + file_->path.string());
    return {};
  }

  void verify(const std::string& model_hash, std::function<void(Result<std::string>)> done) override {
    if (fd_.valid() && ::close(fd_.release()) != 0) {
      done(error_from_errno(errno, "cannot write the source check file " + file_->path.string()));
      return;
    }
    // The work holds the file: it exists until the hash op is over, whoever lets go first.
    auto computed = std::make_shared<std::string>();
    CheckWork work = [file = file_, worker = worker_, timeout = timeout_, model_hash,
                      computed](const std::atomic<bool>* cancel) -> Status {
      auto hash = verify_source_file(worker, file->path, model_hash, timeout, cancel);
      if (!hash) return std::move(hash).error();
      *computed = std::move(*hash);
      return {};
    };
    queue_(std::move(work), [computed, done = std::move(done)](Status st) {
      if (!st) return done(std::move(st).error());
      done(std::move(*computed));
    });
  }

 private:
  std::shared_ptr<CheckFile> file_;
  posix::UniqueFd fd_;
  WorkerCommand worker_;
  std::chrono::milliseconds timeout_;
  CheckQueue queue_;
};

std::atomic<std::uint64_t> g_serial{0};

}  // namespace

Result<std::string> verify_source_file(const WorkerCommand& worker, const fs::path& file, const std::string& model_hash,
                                       std::chrono::milliseconds timeout, const std::atomic<bool>* cancel) {
  const std::string nothing = "; nothing was stored";
  WorkerLimits limits;
  limits.timeout = timeout;
  limits.max_log = 64 * 1024;
  // A private TMPDIR, the one place the sandboxed hash op may write: torch.export.load
  // unpacks the archive through tempfile, which fails where no temporary folder is writable.
  WorkerCommand cmd = worker;
  const fs::path tmp = file.string() + ".tmp";
  struct Scratch {
    fs::path path;
    ~Scratch() {
      std::error_code ec;
      fs::remove_all(path, ec);
      if (ec) spdlog::warn("builds: cannot remove the source check's TMPDIR {}: {}", path.string(), ec.message());
    }
  } scratch{tmp};
  std::error_code ec;
  if (!fs::create_directory(tmp, ec) || ec)
    return make_error(Errc::io_error, "cannot create the source check's TMPDIR " + tmp.string() + ": " +
                                          (ec ? ec.message() : std::string("it exists")) + nothing);
  if (const auto& user = cmd.sandbox.user; user && ::chown(tmp.c_str(), user->uid, user->gid) != 0)
    return error_from_errno(errno, "cannot give the source check's TMPDIR " + tmp.string() + " to worker_user " + user->name);
  cmd.env["TMPDIR"] = tmp.string();
  cmd.sandbox.writable.push_back(tmp);
  WorkerExit exit = run_worker(cmd, encode_hash_request(file), limits, cancel);
  if (exit.how == WorkerExit::How::timed_out)
    return make_error(Errc::timeout, "cannot verify the source's model hash: the build worker's hash op " + exit.describe() +
                                         " ([builds] source_check_timeout_s)" + nothing);
  if (exit.how == WorkerExit::How::cancelled)
    return make_error(Errc::cancelled, "cannot verify the source's model hash: kilnd is shutting down" + nothing);
  auto report = parse_hash_result(exit);
  if (!report)
    return make_error(Errc::invalid_argument, "cannot verify the source's model hash on this node: " +
                                                  report.error().message + nothing);
  if (!model_hash.empty() && report->model_hash != model_hash)
    return make_error(Errc::invalid_argument,
                      "the source hashes to model hash " + report->model_hash + " on this node, not " + model_hash +
                          ", the model hash it was registered under" + nothing +
                          " (register it under its own hash: `kilnctl source add FILE` computes it)");
  return report->model_hash;
}

Result<std::unique_ptr<daemon::SourceCheck>> make_source_check(const fs::path& dir, WorkerCommand worker,
                                                               std::chrono::milliseconds timeout, CheckQueue queue) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(Errc::io_error, "cannot create " + dir.string() + ": " + ec.message());
  auto file = std::make_shared<CheckFile>();
  file->path = dir / (std::to_string(::getpid()) + "-" + std::to_string(++g_serial) + ".pt2");
  posix::UniqueFd fd(::open(file->path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    int err = errno;
    file->path.clear();  // nothing of ours to remove
    return error_from_errno(err, "cannot create the source check file in " + dir.string());
  }
  // The hash op reads it as [builds] worker_user when one is set: through that user's group,
  // read-only, so that it cannot change the bytes it vouches for.
  if (const auto& user = worker.sandbox.user;
      user && (::fchown(fd.get(), static_cast<uid_t>(-1), user->gid) != 0 || ::fchmod(fd.get(), 0640) != 0)) {
    int err = errno;
    fd.reset();
    fs::remove(file->path, ec);
    file->path.clear();
    return error_from_errno(err, "cannot give the source check file to worker_user " + user->name);
  }
  return std::unique_ptr<daemon::SourceCheck>(
      std::make_unique<FileSourceCheck>(std::move(file), std::move(fd), std::move(worker), timeout, std::move(queue)));
}

}  // namespace kiln::build
