#include <sys/stat.h>

#include <map>
#include <vector>

#include "kiln/oci/tar.hpp"
#include "tar_header.hpp"
#include "file_io.hpp"

namespace kiln::oci {

using detail::Block;
using detail::kBlock;

namespace {

constexpr std::uint64_t kMaxMetaEntry = 1 << 20;  // pax / long-name payloads

// pax records: "<len> <key>=<value>\n". Only path and size matter to us.
Status parse_pax(std::string_view text, std::optional<std::string>& path, std::optional<std::uint64_t>& size) {
  while (!text.empty()) {
    std::size_t sp = text.find(' ');
    if (sp == std::string_view::npos) return make_error(Errc::corrupt, "tar: malformed pax record");
    std::uint64_t len = 0;
    for (char c : text.substr(0, sp)) {
      if (c < '0' || c > '9') return make_error(Errc::corrupt, "tar: malformed pax record length");
      len = len * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (len <= sp + 1 || len > text.size()) return make_error(Errc::corrupt, "tar: pax record length out of range");
    std::string_view rec = text.substr(sp + 1, len - sp - 2);  // without the trailing '\n'
    std::size_t eq = rec.find('=');
    if (eq != std::string_view::npos) {
      std::string_view k = rec.substr(0, eq), v = rec.substr(eq + 1);
      if (k == "path") path = std::string(v);
      if (k == "size") {
        std::uint64_t n = 0;
        for (char c : v) {
          if (c < '0' || c > '9') return make_error(Errc::corrupt, "tar: malformed pax size");
          n = n * 10 + static_cast<std::uint64_t>(c - '0');
        }
        size = n;
      }
    }
    text.remove_prefix(len);
  }
  return {};
}

}  // namespace

struct TarReader::Impl {
  detail::UniqueFd fd;
  std::string path;
  std::uint64_t file_size = 0;
  std::vector<TarEntry> entries;
  std::map<std::string, std::size_t, std::less<>> by_name;

  Result<std::string> read_payload(std::uint64_t offset, std::uint64_t size, const std::string& what) {
    if (size > kMaxMetaEntry) return make_error(Errc::corrupt, "tar: " + what + " header too large");
    std::string out(size, '\0');
    KILN_TRY(detail::pread_all(fd.get(), std::as_writable_bytes(std::span(out)), offset, path));
    return out;
  }

  Status scan() {
    std::uint64_t offset = 0;
    std::optional<std::string> next_path;
    std::optional<std::uint64_t> next_size;
    for (;;) {
      if (offset == file_size) return {};  // no end marker: tolerated, every entry was whole
      if (offset + kBlock > file_size) return make_error(Errc::corrupt, path + ": truncated tar (partial header)");
      Block block;
      KILN_TRY(detail::pread_all(fd.get(), block, offset, path));
      if (detail::is_zero_block(block)) return {};
      auto h = detail::decode_header(block);
      if (!h) return make_error(h.error().code, path + " at byte " + std::to_string(offset) + ": " + h.error().message);
      std::uint64_t data_offset = offset + kBlock;
      std::uint64_t size = next_size.value_or(h->size);
      if (h->type == 'x' || h->type == 'g' || h->type == 'L') size = h->size;
      if (size > file_size || data_offset + size > file_size) {
        return make_error(Errc::corrupt, path + ": truncated tar: entry '" + h->name + "' needs " +
                                             std::to_string(size) + " bytes past the end of the file");
      }
      offset = data_offset + detail::padded_size(size);
      switch (h->type) {
        case 'x': {
          auto text = read_payload(data_offset, size, "pax");
          if (!text) return std::move(text).error();
          KILN_TRY(parse_pax(*text, next_path, next_size));
          continue;
        }
        case 'g':
          continue;
        case 'L': {
          auto text = read_payload(data_offset, size, "long-name");
          if (!text) return std::move(text).error();
          next_path = std::string(text->c_str());
          continue;
        }
        case '0':
        case '\0':
        case '7':
        case '5':
          break;
        default:
          return make_error(Errc::invalid_argument, path + ": entry '" + h->name + "' has type '" +
                                                        std::string(1, h->type) +
                                                        "': links, devices and fifos are not accepted");
      }
      std::string raw = next_path.value_or(h->name);
      next_path.reset();
      next_size.reset();
      bool is_dir = h->type == '5' || (raw.ends_with('/') && size == 0);
      if (is_dir && (raw == "." || raw == "./")) continue;  // the archive's root folder
      auto name = normalize_member_name(raw);
      if (!name) return make_error(Errc::invalid_argument, path + ": " + name.error().message);
      if (by_name.contains(*name)) {
        if (is_dir) continue;  // a folder listed twice is harmless
        return make_error(Errc::invalid_argument, path + ": entry '" + *name + "' appears twice");
      }
      by_name.emplace(*name, entries.size());
      entries.push_back(TarEntry{*name, is_dir ? TarEntry::Type::directory : TarEntry::Type::file, is_dir ? 0 : size,
                                 data_offset});
    }
  }
};

TarReader::TarReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TarReader::TarReader(TarReader&&) noexcept = default;
TarReader& TarReader::operator=(TarReader&&) noexcept = default;
TarReader::~TarReader() = default;

Result<TarReader> TarReader::open(const std::filesystem::path& file) {
  auto fd = detail::open_fd(file, O_RDONLY);
  if (!fd) return std::move(fd).error();
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return error_from_errno(errno, "stat " + file.string());
  if (!S_ISREG(st.st_mode)) return make_error(Errc::invalid_argument, file.string() + " is not a regular file");
  auto impl = std::make_unique<Impl>();
  impl->fd = std::move(*fd);
  impl->path = file.string();
  impl->file_size = static_cast<std::uint64_t>(st.st_size);
  KILN_TRY(impl->scan());
  return TarReader(std::move(impl));
}

const std::vector<TarEntry>& TarReader::entries() const { return impl_->entries; }

const TarEntry* TarReader::find(std::string_view name) const {
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->entries[it->second];
}

Status TarReader::read(const TarEntry& entry, const ByteSink& sink) const {
  std::vector<std::byte> buf(1 << 20);
  std::uint64_t left = entry.size, offset = entry.data_offset;
  while (left > 0) {
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
    KILN_TRY(detail::pread_all(impl_->fd.get(), std::span(buf.data(), n), offset, impl_->path));
    KILN_TRY(sink(std::span<const std::byte>(buf.data(), n)));
    left -= n;
    offset += n;
  }
  return {};
}

}  // namespace kiln::oci
