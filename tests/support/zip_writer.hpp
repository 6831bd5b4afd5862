// A zip archive writer for tests: stored (uncompressed) members, as torch's
// PyTorchFileWriter writes a .pt2 package, optionally with zip64 end records.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln::test {

inline void zip_le(std::string& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// A zip archive of stored (uncompressed) members, as torch's PyTorchFileWriter writes
// them; with zip64, the end records point through a zip64 end of central directory.
inline std::string make_zip(const std::vector<std::pair<std::string, std::string>>& members, bool zip64) {
  std::string out, central;
  for (const auto& [name, data] : members) {
    const std::uint64_t local = out.size();
    zip_le(out, 0x04034b50, 4); zip_le(out, 20, 2); zip_le(out, 0, 2); zip_le(out, 0, 2); zip_le(out, 0, 4);
    zip_le(out, 0, 4); zip_le(out, data.size(), 4); zip_le(out, data.size(), 4); zip_le(out, name.size(), 2); zip_le(out, 0, 2);
    out += name;
    out += data;
    zip_le(central, 0x02014b50, 4); zip_le(central, 20, 2); zip_le(central, 20, 2); zip_le(central, 0, 2); zip_le(central, 0, 2);
    zip_le(central, 0, 4); zip_le(central, 0, 4); zip_le(central, data.size(), 4); zip_le(central, data.size(), 4);
    zip_le(central, name.size(), 2); zip_le(central, 0, 2); zip_le(central, 0, 2); zip_le(central, 0, 2); zip_le(central, 0, 2);
    zip_le(central, 0, 4); zip_le(central, local, 4);
    central += name;
  }
  const std::uint64_t cd_at = out.size();
  out += central;
  if (zip64) {
    const std::uint64_t rec = out.size();
    zip_le(out, 0x06064b50, 4); zip_le(out, 44, 8); zip_le(out, 45, 2); zip_le(out, 45, 2); zip_le(out, 0, 4); zip_le(out, 0, 4);
    zip_le(out, members.size(), 8); zip_le(out, members.size(), 8); zip_le(out, central.size(), 8); zip_le(out, cd_at, 8);
    zip_le(out, 0x07064b50, 4); zip_le(out, 0, 4); zip_le(out, rec, 8); zip_le(out, 1, 4);
  }
  zip_le(out, 0x06054b50, 4); zip_le(out, 0, 2); zip_le(out, 0, 2);
  zip_le(out, zip64 ? 0xffff : members.size(), 2); zip_le(out, zip64 ? 0xffff : members.size(), 2);
  zip_le(out, zip64 ? 0xffffffff : central.size(), 4); zip_le(out, zip64 ? 0xffffffff : cd_at, 4); zip_le(out, 0, 2);
  return out;
}


}  // namespace kiln::test
