#include "core/base/errors.h"

#include "core/base/escape.h"

#include "core/base/text.h"

namespace batchcheck {
namespace {
std::string join_parts(const std::string& file, const std::string& where, const std::string& what) {
  std::string out;
  for (const std::string* part : {&file, &where, &what}) {
    if (part->empty()) continue;
    if (!out.empty()) out += ": ";
    out += *part;
  }
  return out;
}
}  // namespace

InputError::InputError(std::string file, std::string where, std::string what)
    : std::runtime_error(join_parts(file, where, what)),
      file_(std::move(file)),
      where_(std::move(where)),
      what_(std::move(what)) {}

std::string format_error(const InputError& e) {
  // Errors are one line: a multi-line message (e.g. from LibTorch) is folded, and what a file
  // name or a model's text holds for the terminal (escapes, controls) is made visible.
  return "batchcheck: error: " + terminal_text(single_line(e.what()));
}

}  // namespace batchcheck
