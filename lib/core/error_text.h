#pragma once
// Turning LibTorch / TorchScript exception texts into what a user needs: one line
// with the error, the TorchScript source location, the traceback without C++ frames.
#include <string>

namespace batchcheck {

struct ErrorText {
  std::string message;    // one line, e.g. "shape '[16, -1]' is invalid for input of size 80"
  std::string location;   // 'File "model.py", line 12, in forward' of the innermost frame
  std::string traceback;  // "Traceback of TorchScript ..." section, C++ frames removed
};

ErrorText parse_error_text(const std::string& what);

}  // namespace batchcheck
