#pragma once
#include <string>

namespace batchcheck {
// The LibTorch version batchcheck was built against.
std::string libtorch_version();
}  // namespace batchcheck
