// Reading what an AOTI package records (torch's metadata, kiln's constant names) from its zip archive. See kiln/aoti_metadata.hpp.
#include "kiln/aoti_metadata.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>

namespace kiln {

namespace {

std::uint64_t le(std::span<const std::byte> b, std::size_t at, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(b[at + i]) << (8 * i);
  return v;
}

bool fits(std::span<const std::byte> b, std::uint64_t at, std::uint64_t n) { return at <= b.size() && n <= b.size() - at; }

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_metadata_member(const std::string& name) {
  return name.find("/data/aotinductor/") != std::string::npos && ends_with(name, "_metadata.json");
}

Error damaged(const std::string& what) {
  return make_error(Errc::invalid_argument, "AOTI package: " + what);
}


// The first member of `zip` whose name `wanted` accepts, as its name and bytes; nullopt
// when `zip` is no zip archive torch could open or has no such member. A member kiln reads
// is stored (torch and the worker write them so): a compressed or damaged one is an error.
template <class Wanted>
Result<std::optional<std::pair<std::string, std::string_view>>> stored_member(std::span<const std::byte> zip,
                                                                              Wanted wanted) {
  using Found = std::optional<std::pair<std::string, std::string_view>>;
  // End of central directory: 22 bytes + a comment of at most 64 KiB, at the end.
  constexpr std::uint32_t kEocd = 0x06054b50, kEocd64 = 0x06064b50, kLocator64 = 0x07064b50;
  constexpr std::uint32_t kCentral = 0x02014b50, kLocal = 0x04034b50;
  if (zip.size() < 22) return Found();
  std::size_t eocd = std::string::npos;
  const std::size_t lowest = zip.size() > 22 + 65535 ? zip.size() - 22 - 65535 : 0;
  for (std::size_t at = zip.size() - 22 + 1; at-- > lowest;) {
    if (le(zip, at, 4) == kEocd) {
      eocd = at;
      break;
    }
  }
  if (eocd == std::string::npos) return Found();  // not a zip archive
  std::uint64_t entries = le(zip, eocd + 10, 2), cd_size = le(zip, eocd + 12, 4), cd_at = le(zip, eocd + 16, 4);
  if ((entries == 0xffff || cd_size == 0xffffffff || cd_at == 0xffffffff) && eocd >= 20 &&
      le(zip, eocd - 20, 4) == kLocator64) {
    const std::uint64_t rec = le(zip, eocd - 20 + 8, 8);
    if (!fits(zip, rec, 56) || le(zip, rec, 4) != kEocd64) return Found();  // no zip archive torch could open
    entries = le(zip, rec + 32, 8);
    cd_size = le(zip, rec + 40, 8);
    cd_at = le(zip, rec + 48, 8);
  }
  if (!fits(zip, cd_at, cd_size)) return Found();  // no zip archive torch could open
  std::uint64_t at = cd_at;
  for (std::uint64_t i = 0; i < entries; ++i) {
    if (!fits(zip, at, 46) || le(zip, at, 4) != kCentral) return Found();  // no zip archive torch could open
    const auto method = le(zip, at + 10, 2);
    std::uint64_t csize = le(zip, at + 20, 4), usize = le(zip, at + 24, 4);
    const auto name_len = le(zip, at + 28, 2), extra_len = le(zip, at + 30, 2), comment_len = le(zip, at + 32, 2);
    std::uint64_t local = le(zip, at + 42, 4);
    if (!fits(zip, at + 46, name_len + extra_len + comment_len)) return Found();  // no zip archive torch could open
    std::string name(reinterpret_cast<const char*>(zip.data() + at + 46), name_len);
    // zip64 extra field (id 1): the 8-byte values whose 4-byte fields are all ones, in order.
    for (std::uint64_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      const auto id = le(zip, x, 2), len = le(zip, x + 2, 2);
      if (id == 1) {
        std::uint64_t p = x + 4;
        if (usize == 0xffffffff && p + 8 <= x + 4 + len) usize = le(zip, p, 8), p += 8;
        if (csize == 0xffffffff && p + 8 <= x + 4 + len) csize = le(zip, p, 8), p += 8;
        if (local == 0xffffffff && p + 8 <= x + 4 + len) local = le(zip, p, 8);
      }
      x += 4 + len;
    }
    at += 46 + name_len + extra_len + comment_len;
    if (!wanted(name)) continue;
    if (method != 0) return damaged("member " + name + " is compressed (torch and kiln's worker store it uncompressed)");
    if (!fits(zip, local, 30) || le(zip, local, 4) != kLocal) return damaged("bad local header of " + name);
    const std::uint64_t data = local + 30 + le(zip, local + 26, 2) + le(zip, local + 28, 2);
    if (csize != usize || !fits(zip, data, csize)) return damaged("member " + name + " out of bounds");
    return Found(std::pair(std::move(name), std::string_view(reinterpret_cast<const char*>(zip.data() + data), csize)));
  }
  return Found();
}

// A member's JSON object of strings; invalid_argument when it is anything else.
Result<std::map<std::string, std::string>> string_object(const std::string& name, std::string_view text) {
  auto doc = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return damaged("member " + name + " is not a JSON object");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : doc.items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

}  // namespace

Result<std::optional<std::map<std::string, std::string>>> read_aoti_metadata(std::span<const std::byte> zip) {
  using Meta = std::optional<std::map<std::string, std::string>>;
  auto member = stored_member(zip, is_metadata_member);
  if (!member) return std::move(member).error();
  if (!*member) return Meta();
  auto meta = string_object((**member).first, (**member).second);
  if (!meta) return std::move(meta).error();
  return Meta(std::move(*meta));
}

Result<std::map<std::string, std::string>> read_aoti_constant_names(std::span<const std::byte> zip) {
  auto member = stored_member(zip, [](const std::string& name) {
    const auto slash = name.find('/');  // <root>/kiln/constant_names.json, the root being the package's one folder
    return slash != std::string::npos && name.compare(slash, std::string::npos, "/kiln/constant_names.json") == 0;
  });
  if (!member) return std::move(member).error();
  if (!*member) return std::map<std::string, std::string>();
  auto doc = nlohmann::json::parse((**member).second.begin(), (**member).second.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return damaged("member " + (**member).first + " is not a JSON object");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : doc.items()) {
    if (!v.is_string() || v.get_ref<const std::string&>().empty())
      return damaged("member " + (**member).first + ": the constant " + k + " names no attribute");
    out[k] = v.get<std::string>();
  }
  return out;
}

Status check_aoti_metadata(const Key& key, const std::map<std::string, std::string>& metadata) {
  auto get = [&](const char* name) {
    auto it = metadata.find(name);
    return it == metadata.end() ? std::string() : it->second;
  };
  struct Field {
    const char* key_field;
    const std::string* key_value;
    const char* meta;
    std::string canonical_meta;
  };
  const std::string cc = get("AOTI_COMPUTE_CAPABILITY");
  const Field fields[] = {
      {"platform", &key.platform, "AOTI_PLATFORM", canonical_node_value("platform", get("AOTI_PLATFORM"))},
      {"machine", &key.machine, "AOTI_MACHINE", canonical_node_value("machine", get("AOTI_MACHINE"))},
      {"cpu_isa", &key.cpu_isa, "AOTI_CPU_ISA", canonical_node_value("cpu_isa", get("AOTI_CPU_ISA"))},
      {"gpu_arch", &key.gpu_arch, "AOTI_COMPUTE_CAPABILITY", cc.empty() ? std::string() : canonical_node_value("gpu_arch", cc)},
  };
  for (const auto& f : fields) {
    if (f.canonical_meta.empty()) continue;
    const std::string have = canonical_node_value(f.key_field, *f.key_value);
    if (have != f.canonical_meta) {
      return make_error(Errc::invalid_argument, std::string("key.") + f.key_field + " is " + have +
                                                    " but the package was built for " + f.canonical_meta + " (" +
                                                    f.meta + " " + get(f.meta) + ")");
    }
  }
  return {};
}

}  // namespace kiln
