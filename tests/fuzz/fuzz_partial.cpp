// libFuzzer target: `merge` reads partial reports from other machines. Cutting the clean rows
// out of the raw text and decoding them must refuse any input with an InputError, never read
// out of bounds, and keep the text it leaves valid wherever it was valid.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/errors.h"
#include "core/journal/clean_rows.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string text = input;
  const bool valid = nlohmann::json::accept(text);
  if (const auto rows = batchcheck::take_clean_rows(text)) {
    if (valid && !nlohmann::json::accept(text)) __builtin_trap();  // the cut broke a valid part
    try {
      batchcheck::decode_clean_rows(*rows, "part.json", true);
    } catch (const batchcheck::InputError&) {
    }
  }
  try {
    batchcheck::decode_clean_rows(input, "part.json");
  } catch (const batchcheck::InputError&) {
  }
  return 0;
}
