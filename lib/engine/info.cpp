// Only the version macros: this TU stays cheap to compile.
#include "engine/info.h"

#include <torch/version.h>

namespace batchcheck {
std::string libtorch_version() { return TORCH_VERSION; }
}  // namespace batchcheck
