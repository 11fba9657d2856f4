#pragma once
// Turning LibTorch / TorchScript exception texts into what a user needs: one line
// with the error, the TorchScript source location, the traceback without C++ frames.
#include <cstdint>
#include <optional>
#include <string>

namespace batchcheck {

struct ErrorText {
  std::string message;    // one line, e.g. "shape '[16, -1]' is invalid for input of size 80"
  // 'File "model.py", line 12, in forward': the innermost frame of the user's code, that is
  // outside torch's (and other installed packages') sources; the innermost frame when every
  // frame is library code. From the original code's traceback when the archive has it.
  std::string location;
  std::string source_line;  // the text of that frame's line ("return self.fc(h.view(self.batch_size, -1))")
  std::string raised_in;    // the innermost frame, when it is library code below `location` (torch's linear.py)
  std::string traceback;    // "Traceback of TorchScript ..." section, C++ frames removed
};

// Whether a traceback frame's file is library code: an installed package (site-packages,
// dist-packages), torch's own modules serialized into an archive (code/__torch__/torch/), or
// a torch source tree (torch/nn/, torch/functional.py).
bool library_frame(const std::string& file);

ErrorText parse_error_text(const std::string& what);

// A traced archive records each op's Python stack as its source, innermost first, one
// "path(N): function" per line, down to torch.jit.trace's caller. The user's frame: the
// innermost outside library code, above torch.jit.trace's own frames (else the innermost).
struct SourceFrame {
  std::string file;
  uint64_t line = 0;
};
std::optional<SourceFrame> user_frame_of_trace(const std::string& stack);

}  // namespace batchcheck
