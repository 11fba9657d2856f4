// libFuzzer target: the pickle check reads every byte of a hostile .pt (zip directory, ZIP64
// fields, pickle opcodes, memo, tensor arguments): any input must end as "" or one line,
// without reading out of bounds or exhausting memory. Seeded with torch.save outputs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/parse/pickle_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string problem = batchcheck::check_torch_save(bytes);
  if (problem.find('\n') != std::string::npos) __builtin_trap();  // one line, always
  return 0;
}
