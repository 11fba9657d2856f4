#pragma once
// Which of a batch's findings get localized (core/findings/root_cause.h): a NaN/Inf in the
// prediction or the loss, a prediction outside its contract's range; the first few batches
// of each finding id only.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/findings/root_cause.h"
#include "core/pipeline/value_check.h"
#include "core/pipeline/value_findings.h"

namespace batchcheck {

// Localized batches per finding id: the first few say where the values go bad; the rest
// would repeat it at the cost of an instrumented forward each.
constexpr unsigned kLocalizePerId = 3;

struct LocalizePlan {
  LocalizeRequest req;
  std::vector<std::string> ids;  // the findings the result explains
};

// `rule`: the prediction's contract; `localized`: batches localized so far per id, counted
// here. nullopt: nothing in this batch to localize.
std::optional<LocalizePlan> plan_localize(const std::vector<Emitted>& emitted, const std::optional<ValueRule>& rule,
                                          uint64_t batch_size, std::map<std::string, unsigned>& localized);

}  // namespace batchcheck
