#include "core/findings/error_text.h"

#include <sstream>
#include <vector>

#include "core/base/text.h"

namespace batchcheck {

namespace {
bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// "RuntimeError: x" -> "x"; "builtins.ValueError: x" -> "ValueError: x".
std::string strip_class(const std::string& line) {
  auto colon = line.find(": ");
  if (colon == std::string::npos) return line;
  std::string cls = line.substr(0, colon);
  if (cls.find(' ') != std::string::npos) return line;
  bool error_class = cls.size() > 5 && (cls.compare(cls.size() - 5, 5, "Error") == 0 ||
                                        (cls.size() > 9 && cls.compare(cls.size() - 9, 9, "Exception") == 0));
  if (!error_class) return line;
  std::string rest = line.substr(colon + 2);
  if (cls == "RuntimeError") return rest;
  if (starts_with(cls, "builtins.")) cls = cls.substr(9);
  return cls + ": " + rest;
}
}  // namespace

bool library_frame(const std::string& file) {
  for (const char* part : {"site-packages/", "dist-packages/", "code/__torch__/torch/", "/torch/nn/", "/torch/functional.py"}) {
    if (file.find(part) != std::string::npos) return true;
  }
  // batchcheck's own package run from a checkout (PYTHONPATH=python): its frames (the step's
  // wrapper) are never the user's line.
  static const std::string kPackage = "/python/batchcheck/";
  const std::string::size_type at = file.find(kPackage);
  if (at != std::string::npos && file.find('/', at + kPackage.size()) == std::string::npos && file.size() > 3 &&
      file.compare(file.size() - 3, 3, ".py") == 0) {
    return true;
  }
  return starts_with(file, "torch/");
}

std::optional<SourceFrame> user_frame_of_trace(const std::string& stack) {
  std::istringstream in(stack);
  std::optional<SourceFrame> innermost;
  for (std::string l; std::getline(in, l);) {
    // "path(N): function"
    const auto close = l.rfind("): ");
    const auto open = close == std::string::npos ? std::string::npos : l.rfind('(', close);
    if (open == std::string::npos || open == 0) break;  // past the frames ("Serialized ...")
    const std::string digits = l.substr(open + 1, close - open - 1);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) break;
    SourceFrame f{l.substr(0, open), std::stoull(digits)};
    if (f.file.find("torch/jit/_trace.py") != std::string::npos) break;  // the tracing call itself
    if (!innermost) innermost = f;
    if (!library_frame(f.file)) return f;
  }
  return innermost;
}

ErrorText parse_error_text(const std::string& what) {
  std::vector<std::string> lines;
  {
    std::istringstream in(what);
    std::string line;
    bool in_cpp_trace = false;
    while (std::getline(in, line)) {
      std::string t = trim(line);
      // c10::Error appends the C++ backtrace: "Exception raised from ..." then "frame #N: ...".
      if (starts_with(t, "Exception raised from")) {
        in_cpp_trace = true;
        continue;
      }
      if (starts_with(t, "frame #")) continue;
      if (in_cpp_trace && t.empty()) {
        in_cpp_trace = false;
        continue;
      }
      in_cpp_trace = false;
      lines.push_back(line);
    }
  }
  ErrorText out;
  std::size_t tb = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("Traceback of TorchScript") != std::string::npos) {
      tb = i;
      break;
    }
  }
  // The message: the last "SomethingError: ..." line after the traceback, or the first line.
  std::string message;
  for (std::size_t i = lines.size(); i-- > 0;) {
    std::string t = trim(lines[i]);
    if (t.empty()) continue;
    auto colon = t.find(": ");
    if (colon != std::string::npos && t.substr(0, colon).find(' ') == std::string::npos &&
        (t.substr(0, colon).find("Error") != std::string::npos || t.substr(0, colon).find("Exception") != std::string::npos)) {
      message = strip_class(t);
      break;
    }
  }
  if (message.empty()) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      std::string t = trim(lines[i]);
      if (i >= tb) break;
      if (!t.empty() && t.find("The following operation failed") == std::string::npos) {
        message = t;
        break;
      }
    }
  }
  if (message.empty()) {
    for (const auto& l : lines) {
      if (!trim(l).empty()) {
        message = trim(l);
        break;
      }
    }
  }
  out.message = single_line(message);
  if (tb < lines.size()) {
    std::string tbtext;
    // Frames: the "File ..." line and the line marked "<--- HERE" below it. An archive's error
    // holds two tracebacks, the serialized code's and then the original code's: the original
    // one is the user's, so it replaces the first.
    struct Frame {
      std::string where, file, line;
    };
    std::vector<Frame> frames;
    for (std::size_t i = tb; i < lines.size(); ++i) {
      tbtext += lines[i] + "\n";
      std::string t = trim(lines[i]);
      if (t.find("Traceback of TorchScript, original code") != std::string::npos) frames.clear();
      if (starts_with(t, "File \"")) {
        const std::size_t end = t.find('"', 6);
        frames.push_back({t, end == std::string::npos ? "" : t.substr(6, end - 6), ""});
      } else if (t.find("<--- HERE") != std::string::npos && !frames.empty() && frames.back().line.empty() && i > tb) {
        frames.back().line = trim(lines[i - 1]);
      }
    }
    if (!frames.empty()) {
      const Frame* user = &frames.back();
      for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
        if (!library_frame(it->file)) {
          user = &*it;
          break;
        }
      }
      out.location = user->where;
      out.source_line = user->line;
      if (user != &frames.back()) out.raised_in = frames.back().where;
    }
    while (!tbtext.empty() && (tbtext.back() == '\n' || tbtext.back() == ' ')) tbtext.pop_back();
    out.traceback = tbtext;
  }
  return out;
}

}  // namespace batchcheck
