// libFuzzer target: the config parser must turn any bytes into a Config or an InputError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/config.h"
#include "core/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    batchcheck::parse_config("fuzz.json", text, "/base");
  } catch (const batchcheck::InputError& e) {
    // Expected for bad input; the message must format without trouble.
    (void)batchcheck::format_error(e);
  }
  return 0;
}
