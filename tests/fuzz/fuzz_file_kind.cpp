// libFuzzer target: telling what a wrong model/data file is reads arbitrary bytes (zip
// headers, pickle opcodes): any input must classify without reading out of bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/parse/file_kind.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  batchcheck::FileKind k = batchcheck::classify_torch_file(bytes);
  (void)batchcheck::model_file_hint(k);
  (void)batchcheck::data_file_hint(k);
  return 0;
}
