#include "core/parse/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/errors.h"
#include "core/base/files.h"
#include "core/base/int128.h"
#include "core/base/json_input.h"
#include "core/base/text.h"

namespace batchcheck {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;
constexpr std::size_t kMaxHeader = 1 << 20;
// The most samples an array whose samples hold no data may claim: as many as the engine permutes
// for a shuffled loader's earlier epochs (2^28, permutation.cpp), 2 GiB as int64 indices.
constexpr uint64_t kMaxZeroWidthSamples = uint64_t{1} << 28;

struct DtypeName {
  const char* descr;  // without the byte-order character
  NpyDtype dtype;
};
constexpr DtypeName kDtypes[] = {
    {"f2", NpyDtype::Float16}, {"f4", NpyDtype::Float32}, {"f8", NpyDtype::Float64}, {"i1", NpyDtype::Int8},
    {"i2", NpyDtype::Int16},   {"i4", NpyDtype::Int32},   {"i8", NpyDtype::Int64},   {"u1", NpyDtype::UInt8},
    {"b1", NpyDtype::Bool},
};

// A tiny reader for the Python-literal dict numpy writes:
// {'descr': '<f4', 'fortran_order': False, 'shape': (1041, 3, 64, 64), }
class DictParser {
 public:
  DictParser(const std::string& display, const std::string& text) : display_(display), s_(text) {}

  void parse(std::string& descr, bool& fortran, std::vector<uint64_t>& shape, bool& have_descr, bool& have_order,
             bool& have_shape) {
    skip();
    expect('{');
    while (true) {
      skip();
      if (peek() == '}') break;
      std::string key = string_literal();
      skip();
      expect(':');
      skip();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"') fail("a structured dtype (descr is not a string) is not supported");
        descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        have_order = true;
      } else if (key == "shape") {
        shape = tuple();
        have_shape = true;
      } else {
        fail("unexpected key '" + key + "' in the header");
      }
      skip();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip();
      if (peek() != '}') fail("malformed header dict");
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw InputError(display_, "npy header", what); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("malformed header dict: expected '") + c + "'");
    ++i_;
  }
  std::string string_literal() {
    char q = peek();
    if (q != '\'' && q != '"') fail("malformed header dict: expected a quoted key");
    ++i_;
    std::size_t end = s_.find(q, i_);
    if (end == std::string::npos) fail("malformed header dict: unterminated string");
    std::string out = s_.substr(i_, end - i_);
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    fail("malformed header dict: fortran_order is not True or False");
  }
  std::vector<uint64_t> tuple() {
    expect('(');
    std::vector<uint64_t> out;
    while (true) {
      skip();
      if (peek() == ')') {
        ++i_;
        return out;
      }
      std::size_t start = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      // numpy may write 3L on old Pythons.
      auto v = parse_u64(std::string_view(s_).substr(start, i_ - start));
      if (!v) fail("malformed shape in the header");
      if (peek() == 'L') ++i_;
      out.push_back(*v);
      skip();
      if (peek() == ',') ++i_;
      else if (peek() != ')') fail("malformed shape in the header");
    }
  }

  const std::string& display_;
  const std::string& s_;
  std::size_t i_ = 0;
};

}  // namespace

const char* to_string(NpyDtype d) {
  switch (d) {
    case NpyDtype::Float16: return "float16";
    case NpyDtype::Float32: return "float32";
    case NpyDtype::Float64: return "float64";
    case NpyDtype::Int8: return "int8";
    case NpyDtype::Int16: return "int16";
    case NpyDtype::Int32: return "int32";
    case NpyDtype::Int64: return "int64";
    case NpyDtype::UInt8: return "uint8";
    case NpyDtype::Bool: return "bool";
  }
  return "?";
}

std::size_t itemsize(NpyDtype d) {
  switch (d) {
    case NpyDtype::Float16: return 2;
    case NpyDtype::Float32: return 4;
    case NpyDtype::Float64: return 8;
    case NpyDtype::Int8: return 1;
    case NpyDtype::Int16: return 2;
    case NpyDtype::Int32: return 4;
    case NpyDtype::Int64: return 8;
    case NpyDtype::UInt8: return 1;
    case NpyDtype::Bool: return 1;
  }
  return 1;
}

NpyHeader parse_npy_header(const std::string& display, const std::string& bytes) {
  if (bytes.size() < kMagicLen || bytes.compare(0, kMagicLen, kMagic, kMagicLen) != 0) {
    throw InputError(display, "", "not a .npy file (bad magic bytes)");
  }
  if (bytes.size() < 10) throw InputError(display, "npy header", "truncated header");
  const auto major = static_cast<unsigned char>(bytes[6]);
  std::size_t len_bytes = 0;
  if (major == 1) {
    len_bytes = 2;
  } else if (major == 2 || major == 3) {
    len_bytes = 4;
  } else {
    throw InputError(display, "npy header", "unsupported format version " + std::to_string(major));
  }
  const std::size_t prefix = 8 + len_bytes;
  if (bytes.size() < prefix) throw InputError(display, "npy header", "truncated header");
  uint64_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  }
  if (header_len > kMaxHeader) throw InputError(display, "npy header", "header length " + std::to_string(header_len) + " is implausible");
  if (bytes.size() < prefix + header_len) throw InputError(display, "npy header", "truncated header");
  const std::string dict = bytes.substr(prefix, header_len);

  std::string descr;
  bool fortran = false, have_descr = false, have_order = false, have_shape = false;
  NpyHeader h;
  DictParser(display, dict).parse(descr, fortran, h.shape, have_descr, have_order, have_shape);
  if (!have_descr || !have_order || !have_shape) {
    throw InputError(display, "npy header", "the header lacks 'descr', 'fortran_order' or 'shape'");
  }
  if (descr == "|O" || descr == "O") {
    throw InputError(display, "npy header", "object arrays (pickled Python objects) are refused; save a numeric array");
  }
  if (descr.size() < 2) throw InputError(display, "npy header", "unsupported dtype '" + descr + "'");
  const char order = descr[0];
  const std::string code = descr.substr(1);
  bool known = false;
  for (const auto& d : kDtypes) {
    if (code == d.descr) {
      h.dtype = d.dtype;
      known = true;
    }
  }
  if (!known) {
    throw InputError(display, "npy header",
                     "unsupported dtype '" + descr +
                         "' (supported: float16/32/64, int8/16/32/64, uint8, bool)");
  }
  if (order == '>' && itemsize(h.dtype) > 1) {
    throw InputError(display, "npy header", "big-endian data ('" + descr + "') is not supported; save it little-endian");
  }
  if (order != '<' && order != '|' && order != '=' && order != '>') {
    throw InputError(display, "npy header", "unsupported dtype '" + descr + "'");
  }
  if (fortran && h.shape.size() > 1) {
    throw InputError(display, "npy header", "Fortran-order arrays are not supported; save with np.ascontiguousarray");
  }
  if (h.shape.empty()) {
    throw InputError(display, "npy header", "a 0-d array has no sample dimension; expected shape (samples, ...)");
  }
  // numpy 2 writes at most 64 dimensions (NPY_MAXDIMS); a header may list thousands, which
  // every message naming the shape would repeat.
  if (h.shape.size() > 64) {
    throw InputError(display, "npy header", "the shape has " + std::to_string(h.shape.size()) + " dimensions; numpy allows at most 64");
  }
  bool zero_width = false;
  for (std::size_t i = 1; i < h.shape.size(); ++i) zero_width = zero_width || h.shape[i] == 0;
  // A zero-width sample (a 0 among the inner dimensions) holds no bytes, so the file's size
  // does not bound the sample count as it does for every other array, yet the replay spends
  // memory per sample: the sampler's order and a batch's indices are 8 bytes (int64) each.
  if (zero_width && h.shape[0] > kMaxZeroWidthSamples) {
    throw InputError(display, "npy header",
                     "shape (" + join_uints(h.shape) + ") has samples of no data, so its file does not bound their count: " +
                         std::to_string(h.shape[0]) + " samples would take " +
                         format_bytes(static_cast<long double>(h.shape[0]) * 8) +
                         " as the sampler's int64 order; an array with zero-width samples may hold at most " +
                         std::to_string(kMaxZeroWidthSamples) + " (2^28)");
  }
  // numpy's own bound (ctors.c): the product of the nonzero dimensions, in bytes, must fit,
  // which also keeps every dimension an int64 for torch, however many zeros the shape has.
  uint128 nonzero = itemsize(h.dtype);
  for (uint64_t d : h.shape) {
    if (d == 0) continue;
    nonzero *= d;
    if (nonzero > (uint128{1} << 62)) throw InputError(display, "npy header", "the shape's element count overflows");
  }
  uint128 row = itemsize(h.dtype);
  for (std::size_t i = 1; i < h.shape.size(); ++i) row *= h.shape[i];
  h.row_bytes = static_cast<uint64_t>(row);
  h.data_offset = prefix + header_len;
  return h;
}

void write_npy(const std::string& path, NpyDtype dtype, const std::vector<uint64_t>& shape, const void* data) {
  std::string descr;
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) descr = (itemsize(dtype) == 1 ? "|" : "<") + std::string(d.descr);
  }
  std::string shape_text = "(";
  uint64_t count = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    shape_text += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
    count *= shape[i];
  }
  shape_text += ")";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text + ", }";
  // Pad so that the data starts on a 64-byte boundary, ending the header with '\n'.
  std::size_t total = kMagicLen + 4 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string head(kMagic, kMagicLen);
  head += '\x01';
  head += '\x00';
  head += static_cast<char>(dict.size() & 0xff);
  head += static_cast<char>((dict.size() >> 8) & 0xff);
  head += dict;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw InputError(path, "", std::string("cannot write: ") + std::strerror(errno));
  const std::size_t bytes = count * itemsize(dtype);
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
            (bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes);
  ok = std::fclose(f) == 0 && ok;
  if (!ok) throw InputError(path, "", "write error");
}

NpyFile::NpyFile(std::string display, const std::string& path) : display_(std::move(display)) {
  require_regular_file(display_, path, "a .npy file");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw InputError(display_, "", std::string("cannot read: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(display_, "", "is a directory, expected a .npy file");
  }
  std::string head(std::min<uint64_t>(static_cast<uint64_t>(st.st_size), kMaxHeader + 12), '\0');
  ssize_t got = ::pread(fd_, head.data(), head.size(), 0);
  if (got < 0) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(display_, "", std::string("read error: ") + std::strerror(errno));
  }
  head.resize(static_cast<std::size_t>(got));
  try {
    header_ = parse_npy_header(display_, head);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
  const uint128 needed = static_cast<uint128>(header_.row_bytes) * header_.shape[0] + header_.data_offset;
  if (static_cast<uint128>(st.st_size) < needed) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(display_, "",
                     "the file is shorter than its header promises: " + std::to_string(st.st_size) + " bytes, expected " +
                         std::to_string(static_cast<uint64_t>(needed)) + " for shape (" +
                         join_uints(header_.shape) + ")");
  }
}

NpyFile::~NpyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void NpyFile::read_at(uint64_t offset, uint64_t size, char* dst) const {
  while (size > 0) {
    ssize_t got = ::pread(fd_, dst, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw InputError(display_, "", got == 0 ? "the file was truncated while reading"
                                              : std::string("read error: ") + std::strerror(errno));
    }
    dst += got;
    offset += static_cast<uint64_t>(got);
    size -= static_cast<uint64_t>(got);
  }
}

void NpyFile::read_rows(const std::vector<int64_t>& indices, void* dst) const {
  char* out = static_cast<char*>(dst);
  const uint64_t row = header_.row_bytes;
  std::size_t i = 0;
  while (i < indices.size()) {
    // Coalesce a run of consecutive indices into one read.
    std::size_t j = i + 1;
    while (j < indices.size() && indices[j] == indices[j - 1] + 1) ++j;
    const auto first = static_cast<uint64_t>(indices[i]);
    if (indices[i] < 0 || first + (j - i) > samples()) throw InternalError("NpyFile::read_rows: index out of range");
    read_at(header_.data_offset + first * row, (j - i) * row, out);
    out += (j - i) * row;
    i = j;
  }
}

void NpyFile::read_span(uint64_t first, uint64_t count, void* dst) const {
  if (first > samples() || count > samples() - first) throw InternalError("NpyFile::read_span: range out of bounds");
  read_at(header_.data_offset + first * header_.row_bytes, count * header_.row_bytes, static_cast<char*>(dst));
}

}  // namespace batchcheck
