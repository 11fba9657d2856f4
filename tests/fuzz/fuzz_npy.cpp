// libFuzzer target: the .npy header parser must accept or reject any bytes with an
// InputError, and an accepted header must describe a consistent layout.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/base/errors.h"
#include "core/parse/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    batchcheck::NpyHeader h = batchcheck::parse_npy_header("fuzz.npy", bytes);
    if (h.shape.empty() || h.data_offset > bytes.size() || h.row_bytes % batchcheck::itemsize(h.dtype) != 0) std::abort();
  } catch (const batchcheck::InputError& e) {
    (void)batchcheck::format_error(e);
  }
  return 0;
}
