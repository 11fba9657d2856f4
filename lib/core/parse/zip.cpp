// The central directory of a zip file (torch.save and TorchScript archives are zips).
#include "core/parse/zip.h"

namespace batchcheck {

uint64_t read_le(std::string_view s, std::size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
  return v;
}

std::string archive_root(const std::map<std::string, ZipMember>& members) {
  std::string root;  // the last in name order, should a zip hold two
  for (const auto& [name, m] : members) {
    (void)m;
    if (name.size() >= 9 && name.compare(name.size() - 9, 9, "/data.pkl") == 0 && name.find('/') == name.size() - 9) {
      root = name.substr(0, name.size() - 8);
    }
  }
  return root;
}

// The zip's members by name, from its central directory; nullopt (with `problem`) when the
// directory itself is inconsistent with the file.
std::optional<std::map<std::string, ZipMember>> zip_members(std::string_view z, std::string& problem) {
  problem = "its zip directory is damaged (the file is truncated or corrupt)";
  if (z.size() < 22) return std::nullopt;
  std::size_t eocd = std::string_view::npos;
  const std::size_t lowest = z.size() > 65557 ? z.size() - 65557 : 0;
  for (std::size_t p = z.size() - 22 + 1; p-- > lowest;) {
    if (z.compare(p, 4, "PK\x05\x06") == 0) {
      eocd = p;
      break;
    }
  }
  if (eocd == std::string_view::npos) return std::nullopt;
  uint64_t entries = read_le(z, eocd + 10, 2), cd_size = read_le(z, eocd + 12, 4), cd_off = read_le(z, eocd + 16, 4);
  if (entries == 0xffff || cd_size == 0xffffffff || cd_off == 0xffffffff) {
    // ZIP64: the locator sits right before the classic end record.
    if (eocd < 20 || z.compare(eocd - 20, 4, "PK\x06\x07") != 0) return std::nullopt;
    const uint64_t rec = read_le(z, eocd - 20 + 8, 8);
    if (rec > z.size() || z.size() - rec < 56 || z.compare(rec, 4, "PK\x06\x06") != 0) return std::nullopt;
    entries = read_le(z, rec + 32, 8);
    cd_size = read_le(z, rec + 40, 8);
    cd_off = read_le(z, rec + 48, 8);
  }
  if (cd_off > z.size() || cd_size > z.size() - cd_off) return std::nullopt;
  std::map<std::string, ZipMember> out;
  std::size_t p = cd_off;
  for (uint64_t i = 0; i < entries; ++i) {
    if (p > z.size() || z.size() - p < 46 || z.compare(p, 4, "PK\x01\x02") != 0) return std::nullopt;
    const uint64_t method = read_le(z, p + 10, 2), name_len = read_le(z, p + 28, 2), extra_len = read_le(z, p + 30, 2),
                   comment_len = read_le(z, p + 32, 2);
    uint64_t size = read_le(z, p + 24, 4), local = read_le(z, p + 42, 4);
    if (z.size() - p - 46 < name_len + extra_len + comment_len) return std::nullopt;
    std::string name(z.substr(p + 46, name_len));
    // ZIP64 extra field: the 64-bit values of the fields that read 0xffffffff, in order.
    std::size_t e = p + 46 + name_len;
    const std::size_t e_end = e + extra_len;
    while (e + 4 <= e_end) {
      const uint64_t id = read_le(z, e, 2), len = read_le(z, e + 2, 2);
      if (e + 4 + len > e_end) return std::nullopt;
      if (id == 1) {
        std::size_t f = e + 4;
        auto next = [&](uint64_t& field) {
          if (field != 0xffffffff) return true;
          if (f + 8 > e + 4 + len) return false;
          field = read_le(z, f, 8);
          f += 8;
          return true;
        };
        uint64_t compressed = read_le(z, p + 20, 4);
        if (!next(size) || !next(compressed) || !next(local)) return std::nullopt;
      }
      e += 4 + len;
    }
    // The member's bytes must lie in the file.
    if (local > z.size() || z.size() - local < 30 || z.compare(local, 4, "PK\x03\x04") != 0) return std::nullopt;
    const uint64_t data = local + 30 + read_le(z, local + 26, 2) + read_le(z, local + 28, 2);
    if (method == 0 && (data > z.size() || size > z.size() - data)) return std::nullopt;
    out[name] = {data, size, method == 0};
    p += 46 + name_len + extra_len + comment_len;
  }
  problem.clear();
  return out;
}


}  // namespace batchcheck
