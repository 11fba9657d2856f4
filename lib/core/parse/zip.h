#pragma once
// A zip file's central directory, read with bounds (ZIP64 included): what pickle_check walks
// and what the .pt data source maps tensors from. Pure, no LibTorch.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace batchcheck {

// The little-endian unsigned integer of `bytes` (1..8) bytes at `at`; the caller checks bounds.
uint64_t read_le(std::string_view s, std::size_t at, int bytes);

struct ZipMember {
  uint64_t offset = 0;  // where its bytes start in the file
  uint64_t size = 0;
  bool stored = true;   // method 0: not compressed
};

// The members by name; nullopt (with `problem`, one line) when the directory is inconsistent
// with the file. A stored member's bytes are checked to lie in the file.
std::optional<std::map<std::string, ZipMember>> zip_members(std::string_view z, std::string& problem);

// The folder holding the archive's data.pkl ("archive/"), as torch.save and TorchScript lay
// it out; "" when there is none.
std::string archive_root(const std::map<std::string, ZipMember>& members);

}  // namespace batchcheck
