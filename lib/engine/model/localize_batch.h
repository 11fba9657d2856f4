#pragma once
// The batch side of localizing (localize/localize.h is the graph side): the model runner's
// instrumented forward on a batch, then the rows of it that still fail.
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "core/findings/root_cause.h"

namespace batchcheck {

class ModelRunner;
struct Config;

// Localizes a bad value of one batch (`args`: what forward takes, `batch` samples): the
// instrumented forward, then, when asked, halving the batch to the rows that still fail.
// The model's buffers are as before afterwards. nullopt when the model keeps no graph or
// the re-run raises.
std::optional<Localization> localize_batch(ModelRunner& model, const Config& cfg, const std::vector<c10::IValue>& args,
                                           uint64_t batch, const LocalizeRequest& req);

}  // namespace batchcheck
