#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/base/errors.h"
#include "core/parse/npy.h"

using namespace batchcheck;

namespace {

std::string header_bytes(const std::string& dict, int major = 1) {
  std::string h("\x93NUMPY", 6);
  h += static_cast<char>(major);
  h += '\0';
  std::string d = dict;
  if (major == 1) {
    h += static_cast<char>(d.size() & 0xff);
    h += static_cast<char>(d.size() >> 8);
  } else {
    for (int i = 0; i < 4; ++i) h += static_cast<char>((d.size() >> (8 * i)) & 0xff);
  }
  return h + d;
}

std::string error_of(const std::string& bytes) {
  try {
    parse_npy_header("x.npy", bytes);
  } catch (const InputError& e) {
    return format_error(e);
  }
  return "(no error)";
}

class NpyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("bc_npy_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  std::filesystem::path dir_;
};

}  // namespace

TEST(NpyHeader, ParsesVersions1And2) {
  auto h = parse_npy_header("x.npy", header_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1041, 3, 64, 64), }\n"));
  EXPECT_EQ(h.dtype, NpyDtype::Float32);
  EXPECT_EQ(h.shape, (std::vector<uint64_t>{1041, 3, 64, 64}));
  EXPECT_EQ(h.row_bytes, 3u * 64 * 64 * 4);
  auto h2 = parse_npy_header("x.npy", header_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (7,), }", 2));
  EXPECT_EQ(h2.dtype, NpyDtype::UInt8);
  EXPECT_EQ(h2.row_bytes, 1u);
  EXPECT_EQ(h2.data_offset, 12u + h2.data_offset - 12u);
}

TEST(NpyHeader, RejectsBadInputWithClearErrors) {
  const std::string fortran = "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 3), }";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"PK\x03\x04 not numpy", "batchcheck: error: x.npy: not a .npy file (bad magic bytes)"},
      {std::string("\x93NUMPY\x01", 7), "batchcheck: error: x.npy: npy header: truncated header"},
      {header_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }").substr(0, 30),
       "batchcheck: error: x.npy: npy header: truncated header"},
      {header_bytes(fortran), "batchcheck: error: x.npy: npy header: Fortran-order arrays are not supported; save with np.ascontiguousarray"},
      {header_bytes("{'descr': '|O', 'fortran_order': False, 'shape': (4,), }"),
       "batchcheck: error: x.npy: npy header: object arrays (pickled Python objects) are refused; save a numeric array"},
      {header_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }"),
       "batchcheck: error: x.npy: npy header: big-endian data ('>f4') is not supported; save it little-endian"},
      {header_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (4,), }"),
       "batchcheck: error: x.npy: npy header: unsupported dtype '<c8' (supported: float16/32/64, int8/16/32/64, uint8, bool)"},
      {header_bytes("{'descr': '<U5', 'fortran_order': False, 'shape': (4,), }"),
       "batchcheck: error: x.npy: npy header: unsupported dtype '<U5' (supported: float16/32/64, int8/16/32/64, uint8, bool)"},
      {header_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }"),
       "batchcheck: error: x.npy: npy header: a 0-d array has no sample dimension; expected shape (samples, ...)"},
      {header_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }"),
       "batchcheck: error: x.npy: npy header: the shape's element count overflows"},
      {header_bytes("{'descr': '<f4', 'shape': (4,), }"),
       "batchcheck: error: x.npy: npy header: the header lacks 'descr', 'fortran_order' or 'shape'"},
      {header_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4, x), }"),
       "batchcheck: error: x.npy: npy header: malformed shape in the header"},
      {std::string("\x93NUMPY\x09\x00\x10\x00", 10) + std::string(16, ' '),
       "batchcheck: error: x.npy: npy header: unsupported format version 9"},
  };
  for (const auto& [bytes, expected] : cases) EXPECT_EQ(error_of(bytes), expected);
}

TEST_F(NpyFiles, RoundTripAndGather) {
  std::vector<float> v(10 * 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  write_npy(path("a.npy"), NpyDtype::Float32, {10, 3}, v.data());
  NpyFile f("a.npy", path("a.npy"));
  EXPECT_EQ(f.samples(), 10u);
  EXPECT_EQ(f.header().data_offset % 64, 0u);
  std::vector<float> out(4 * 3);
  f.read_rows({2, 3, 9, 0}, out.data());
  EXPECT_EQ(out, (std::vector<float>{6, 7, 8, 9, 10, 11, 27, 28, 29, 0, 1, 2}));
}

TEST_F(NpyFiles, ShorterThanTheHeaderPromises) {
  std::vector<int64_t> v(10, 1);
  write_npy(path("t.npy"), NpyDtype::Int64, {10}, v.data());
  std::filesystem::resize_file(path("t.npy"), std::filesystem::file_size(path("t.npy")) - 8);
  try {
    NpyFile f("t.npy", path("t.npy"));
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), "batchcheck: error: t.npy: the file is shorter than its header promises: 200 bytes, expected 208 for shape (10)");
  }
}

TEST_F(NpyFiles, MissingFileAndDirectory) {
  try {
    NpyFile f("nope.npy", path("nope.npy"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), "batchcheck: error: nope.npy: cannot read: No such file or directory");
  }
  try {
    NpyFile f("dir", dir_.string());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), "batchcheck: error: dir: is a directory, expected a .npy file");
  }
}

// Issue 29 (9): a zero-width sample makes the byte count 0, so the file no longer bounds the
// sample dimension; every other use of the shape must still fit.
TEST(NpyHeader, ZeroWidthSamplesAreBoundedByTheirCount) {
  const std::string expected =
      "batchcheck: error: x.npy: npy header: shape (2305843009213693952, 0) has samples of no data, so its file does not "
      "bound their count: 2305843009213693952 samples would take 16 EiB as the sampler's int64 order; an array with "
      "zero-width samples may hold at most 268435456 (2^28)";
  EXPECT_EQ(error_of(header_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (2305843009213693952, 0), }")), expected);
  EXPECT_EQ(error_of(header_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2305843009213693952, 0), }")), expected);
  // At the bound it is an ordinary (empty-sampled) array.
  auto h = parse_npy_header("x.npy", header_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (268435456, 3, 0), }"));
  EXPECT_EQ(h.row_bytes, 0u);
  EXPECT_EQ(h.shape[0], 268435456u);
}

TEST(NpyHeader, AZeroDoesNotHideADimensionThatOverflows) {
  // numpy's own rule: the nonzero dimensions' product must fit, so every dimension is an int64.
  EXPECT_EQ(error_of(header_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5, 0, 18446744073709551615), }")),
            "batchcheck: error: x.npy: npy header: the shape's element count overflows");
  EXPECT_EQ(error_of(header_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (0, 9223372036854775808), }")),
            "batchcheck: error: x.npy: npy header: the shape's element count overflows");
  EXPECT_EQ(parse_npy_header("x.npy", header_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 1024, 1024), }")).row_bytes,
            8u << 20);
}

TEST_F(NpyFiles, AZeroWidthFileClaimingTwoToThe61SamplesIsRefused) {
  std::string bytes = header_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (2305843009213693952, 0), }\n");
  std::ofstream(path("z.npy"), std::ios::binary) << bytes;
  try {
    NpyFile f("z.npy", path("z.npy"));
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), "batchcheck: error: z.npy: npy header: shape (2305843009213693952, 0) has samples of no data, so "
                               "its file does not bound their count: 2305843009213693952 samples would take 16 EiB as the "
                               "sampler's int64 order; an array with zero-width samples may hold at most 268435456 (2^28)");
  }
}

TEST(NpyHeader, AtMost64Dimensions) {
  std::string shape = "(1";
  for (int i = 0; i < 64; ++i) shape += ", 1";
  EXPECT_EQ(error_of(header_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + "), }")),
            "batchcheck: error: x.npy: npy header: the shape has 65 dimensions; numpy allows at most 64");
}
