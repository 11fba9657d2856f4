#include "core/base/info.h"

#ifndef BATCHCHECK_LIBTORCH_VERSION
#define BATCHCHECK_LIBTORCH_VERSION "unknown"
#endif

namespace batchcheck {
// From find_package(Torch) at configure time: the CLI reports it without loading LibTorch.
std::string libtorch_version() { return BATCHCHECK_LIBTORCH_VERSION; }
}  // namespace batchcheck
