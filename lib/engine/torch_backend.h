#pragma once
// The LibTorch Backend: TorchScript model, npy/pt data, forward, value checks, loss.
// No torch types in this header: callers stay cheap to compile.
#include <memory>
#include <string>

#include "core/config/config.h"
#include "core/pipeline/backend.h"
#include "engine/backend_options.h"

namespace batchcheck {


// Loads the model and opens the data. Throws InputError for unusable files.
std::unique_ptr<Backend> make_torch_backend(const Config& cfg, const BackendOptions& options);

}  // namespace batchcheck
