// kilnctl get: write a stored artifact to a file (atomically) or to stdout.
#include <fcntl.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <iostream>
#include <memory>

#include "kiln/client/json.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/key_flags.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {

struct GetArgs {
  KeyFlags key;
  std::string output;
  bool stream = false;
  bool build = false;
};

// Copies all of `from` (size bytes from offset 0) to `to`: sendfile where the kernel
// allows it, read/write otherwise.
Status copy_fd(int from, int to, std::uint64_t size) {
  off_t offset = 0;
  while (static_cast<std::uint64_t>(offset) < size) {
    ssize_t n = ::sendfile(to, from, &offset, size - static_cast<std::uint64_t>(offset));
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EINVAL || errno == ENOSYS)) break;  // fall back below
    if (n == 0) return make_error(Errc::io_error, "artifact ended early while copying");
    return error_from_errno(errno, "writing the artifact");
  }
  char buf[1 << 16];
  while (static_cast<std::uint64_t>(offset) < size) {
    ssize_t n = ::pread(from, buf, sizeof(buf), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? make_error(Errc::io_error, "artifact ended early") : error_from_errno(errno, "reading the artifact");
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::write(to, buf + done, static_cast<std::size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return error_from_errno(errno, "writing the artifact");
      done += w;
    }
    offset += n;
  }
  return {};
}

// Writes the artifact to `path` through a temporary file renamed into place, so a
// failed or interrupted get never leaves a partial file under the final name.
Status write_file(const client::Artifact& artifact, const std::filesystem::path& path) {
  auto tmp = path;
  tmp += ".kiln-tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error_from_errno(errno, "creating " + tmp.string());
  Status st = copy_fd(artifact.fd(), fd, artifact.size());
  if (st && ::fsync(fd) != 0) st = error_from_errno(errno, "fsync of " + tmp.string());
  if (::close(fd) != 0 && st) st = error_from_errno(errno, "closing " + tmp.string());
  if (st && ::rename(tmp.c_str(), path.c_str()) != 0) st = error_from_errno(errno, "renaming into " + path.string());
  if (!st) ::unlink(tmp.c_str());
  return st;
}

}  // namespace

void add_get(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<GetArgs>();
  CLI::App* sub = set.add("get", "Write a stored artifact to a file (-o) or stdout; exit code 2 when not stored",
                          [&ctx, args] {
    const bool to_stdout = args->output.empty() || args->output == "-";
    if (to_stdout && ctx.json) return ctx.usage("--json prints metadata on stdout: give the artifact a file with -o");
    if (to_stdout && ::isatty(ctx.data_fd))
      return ctx.usage("refusing to write a binary artifact to a terminal: use -o FILE or redirect stdout");
    auto what = lookup_from_flags(args->key, std::cin);
    if (!what) return ctx.fail(what.error());
    auto client = ctx.connect(args->stream ? client::Transfer::stream : client::Transfer::descriptor);
    if (!client) return ctx.fail(client.error());
    client::Client::GetOptions get_options;
    get_options.build_on_miss = args->build;
    auto hit = client->get(*what, get_options);
    if (!hit) return ctx.fail(hit.error());
    if (!*hit) return ctx.fail(make_error(Errc::not_found, "no artifact stored under that key"));
    const client::Artifact& artifact = **hit;
    Status st = to_stdout ? copy_fd(artifact.fd(), ctx.data_fd, artifact.size()) : write_file(artifact, args->output);
    if (!st) return ctx.fail(st.error());
    if (ctx.json) {
      ctx.out << client::to_json(artifact.info()) << "\n";
    } else if (!to_stdout) {
      ctx.out << "wrote " << format_bytes(artifact.size()) << " to " << args->output << "\n";
    }
    return 0;
  });
  add_key_flags(*sub, args->key, DigestFlag::allowed);
  sub->add_option("-o,--output", args->output, "Write to FILE (atomically: a temporary file renamed); default stdout")
      ->option_text("FILE");
  sub->add_flag("--stream", args->stream, "Receive the bytes through the socket instead of as a descriptor");
  sub->add_flag("--build", args->build,
                "On a miss, have kilnd build the artifact from its registered source and wait for it");
}

}  // namespace kiln::ctl
