#include "engine/localize/localize_sites.h"

#include <string>

#include "core/findings/error_text.h"

namespace batchcheck {

namespace jit = torch::jit;

namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

// The module path of an inlined node: the instance names of the calls it was inlined through.
std::string module_path(const jit::Node* n) {
  std::string out;
  if (auto cs = n->callstack()) {
    for (const auto& entry : (*cs)->vec()) {
      const auto& info = std::get<2>(entry);
      if (!info) continue;
      if (!out.empty()) out += ".";
      out += info->instance_name();
    }
  }
  return out;
}

// The file, line and text a source range stands for: the archive's debug records map its
// serialized code back to the user's own file. False when it has no file.
static bool locate(const jit::SourceRange& serialized, OpSite& s) {
  auto original = serialized.findSourceRangeThatGenerated();
  const jit::SourceRange& r = original ? *original : serialized;
  if (!r.source()) return false;
  const auto& src = r.source();
  // A traced op's source is the tracer's Python stack, not code: it names the file and line,
  // and the archive holds no text of them. The path is the model's word, never opened (a
  // model naming /proc/self/environ would put the engine's environment in the report).
  const std::string text = src->text_str().str();
  if (original && text.find("): ") != std::string::npos) {
    if (auto frame = user_frame_of_trace(text)) {
      s.file = frame->file;
      s.line = frame->line;
      return true;
    }
  }
  auto flc = r.file_line_col();
  if (!flc) return false;
  s.file = std::get<0>(*flc);
  s.line = std::get<1>(*flc);
  s.source_line = trim(src->get_line(src->lineno_for_offset(r.start())).str());
  return true;
}

bool traced_op(const jit::Node* n) {
  auto original = n->sourceRange().findSourceRangeThatGenerated();
  if (!original || !original->source()) return false;
  return original->source()->text_str().str().find("): ") != std::string::npos;
}

std::string argument_name(const jit::Value* v) {
  std::string name = v->debugName();
  const auto dot = name.rfind('.');
  if (dot != std::string::npos && dot + 1 < name.size() && name.find_first_not_of("0123456789", dot + 1) == std::string::npos) {
    name.resize(dot);
  }
  return name;
}

OpSite op_site(const jit::Node* n) {
  OpSite s;
  s.op = n->kind().toQualString();
  s.module = module_path(n);
  if (!locate(n->sourceRange(), s) || !library_frame(s.file)) return s;
  // An op inside torch's own code (nn.Linear's F.linear): the user's call that led there,
  // from the innermost call site outward.
  if (auto cs = n->callstack()) {
    auto calls = (*cs)->vec();
    for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
      OpSite caller = s;
      if (locate(std::get<1>(*it), caller) && !library_frame(caller.file)) {
        s.file = caller.file;
        s.line = caller.line;
        s.source_line = caller.source_line;
        break;
      }
    }
  }
  return s;
}

}  // namespace batchcheck
