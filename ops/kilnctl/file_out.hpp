// Writing bytes kilnd handed over (an artifact's or a source's descriptor) to a file or
// to stdout, for `kilnctl get` and `kilnctl source get`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>

#include "kiln/result.hpp"

namespace kiln::ctl {

// Copies `size` bytes of `from` (from offset 0; its file offset is not used) to `to`:
// sendfile where the kernel allows it, pread/write otherwise. io_error naming the
// failing side; what was written then is incomplete. `on_progress` (may be empty) gets the
// bytes copied so far, at least every 8 MiB.
using OnProgress = std::function<void(std::uint64_t done)>;
Status copy_fd(int from, int to, std::uint64_t size, const OnProgress& on_progress = {});

// Writes `size` bytes of `from` to `path` through a temporary file in the same folder,
// fsynced and renamed into place, so a failed or interrupted write never leaves a partial
// file under the final name (nor the temporary one). Only regular files are replaced: a
// device, FIFO, socket or terminal at `path` is written into directly, and a symbolic
// link is followed (the file it names is replaced; the link stays).
Status write_fd_to_file(int from, std::uint64_t size, const std::filesystem::path& path,
                        const OnProgress& on_progress = {});

}  // namespace kiln::ctl
