#pragma once
// A streaming reader for NumPy .npy files (format 1.0, 2.0, 3.0). Only the header is
// read up front; samples are read with positioned reads as batches need them, so
// memory does not grow with the dataset.
#include <cstdint>
#include <string>
#include <vector>

namespace batchcheck {

enum class NpyDtype { Float16, Float32, Float64, Int8, Int16, Int32, Int64, UInt8, Bool };
const char* to_string(NpyDtype d);  // "float32", ...
std::size_t itemsize(NpyDtype d);

struct NpyHeader {
  NpyDtype dtype = NpyDtype::Float32;
  std::vector<uint64_t> shape;  // shape[0] is the sample dimension
  uint64_t data_offset = 0;
  uint64_t row_bytes = 0;       // bytes per sample
};

// Parses and validates the header bytes (magic, version, dict). Throws InputError.
NpyHeader parse_npy_header(const std::string& display, const std::string& bytes);

// Writes a C-order little-endian .npy (format 1.0). Throws InputError if it cannot.
void write_npy(const std::string& path, NpyDtype dtype, const std::vector<uint64_t>& shape, const void* data);

class NpyFile {
 public:
  // display: the name errors use (the path as written in the config).
  NpyFile(std::string display, const std::string& path);
  ~NpyFile();
  NpyFile(const NpyFile&) = delete;
  NpyFile& operator=(const NpyFile&) = delete;

  const NpyHeader& header() const { return header_; }
  const std::string& display() const { return display_; }
  uint64_t samples() const { return header_.shape[0]; }
  // Reads the given samples, in order, into dst (indices.size() * row_bytes bytes).
  // Consecutive indices are read with one call.
  void read_rows(const std::vector<int64_t>& indices, void* dst) const;
  // Reads `count` consecutive samples from `first` into dst.
  void read_span(uint64_t first, uint64_t count, void* dst) const;

 private:
  void read_at(uint64_t offset, uint64_t size, char* dst) const;
  std::string display_;
  int fd_ = -1;
  NpyHeader header_;
};

}  // namespace batchcheck
