#include "core/journal/step_log.h"

#include "core/journal/journal.h"

namespace batchcheck {

StepEnd CleanStep::end() const {
  StepEnd e;
  e.step = at.step;
  e.forward_ok = forward_ok;
  e.size = at.size;
  if (shapes) e.shapes = *shapes;
  e.stats = stats;
  return e;
}

void StepLog::clean(const StepInfo& at, const StepEnd& e) {
  CleanStep& c = clean_[at.step];
  c.at = at;
  c.forward_ok = e.forward_ok;
  c.stats = e.stats;
  if (!e.shapes) return;
  // Only the lowest and the highest step's shapes are ever read (the report's first and last
  // batch): keep two, whatever order the steps end in (--fail-fast).
  auto strip = [this](uint64_t step) {
    auto it = clean_.find(step);
    if (it != clean_.end()) it->second.shapes.reset();
  };
  const uint64_t s = at.step;
  if (!shaped_lo_) {
    shaped_lo_ = shaped_hi_ = s;
  } else if (s < *shaped_lo_) {
    if (*shaped_lo_ != *shaped_hi_) strip(*shaped_lo_);
    shaped_lo_ = s;
  } else if (s > *shaped_hi_) {
    if (*shaped_lo_ != *shaped_hi_) strip(*shaped_hi_);
    shaped_hi_ = s;
  } else {
    return;
  }
  c.shapes = std::make_unique<BatchShapes>(*e.shapes);
}

nlohmann::ordered_json clean_step_lines(const CleanStep& c) {
  std::vector<nlohmann::ordered_json> out;
  JournalWriter w(&out);
  w.begin(c.at, {});
  w.end(c.end());
  return nlohmann::ordered_json(out);
}

nlohmann::ordered_json& StepLog::lines(uint64_t step) {
  auto [it, fresh] = lines_.try_emplace(step, nlohmann::ordered_json::array());
  if (fresh) {
    auto c = clean_.find(step);
    if (c != clean_.end()) {
      it->second = clean_step_lines(c->second);
      clean_.erase(c);
    }
  }
  return it->second;
}

}  // namespace batchcheck
