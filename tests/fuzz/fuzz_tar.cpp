// libFuzzer target for the tar reader (ops/oci/src/tar_reader.cpp): kilnctl import reads
// archives carried from elsewhere (a USB stick), so every byte of one is untrusted. Any
// input must either be refused with a message or give entries that hold up: names
// normalized, data inside the file, every entry readable to exactly its size.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kiln/oci/tar.hpp"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The reader opens a path: hand it the input through a memfd, no disk involved.
  int fd = ::memfd_create("fuzz-tar", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  for (std::size_t done = 0; done < size;) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto reader = oci::TarReader::open(path);
  if (!reader) {
    if (reader.error().message.empty()) std::abort();  // every refusal says why
    ::close(fd);
    return 0;
  }
  for (const auto& e : reader->entries()) {
    auto normalized = oci::normalize_member_name(e.name);
    if (!normalized || *normalized != e.name) std::abort();
    if (e.data_offset > size || e.size > size - e.data_offset) std::abort();  // data past the end
    if (reader->find(e.name) == nullptr) std::abort();
    std::uint64_t got = 0;
    auto st = reader->read(e, [&](std::span<const std::byte> chunk) -> Status {
      got += chunk.size();
      return {};
    });
    if (st && got != e.size) std::abort();
  }
  ::close(fd);
  return 0;
}
