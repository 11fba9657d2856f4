#include "core/journal/jobs.h"

#include <algorithm>
#include <cstdio>

#include "core/base/text.h"

namespace batchcheck {

namespace {

// Another job pays when the rest of the scan takes this many start-ups or more: the first job
// goes on while the others start, so J jobs take S + (R - S) / J of the rest R, which breaks
// even at one start-up S (one more for noise, the memory and the parent's share of the cores).
constexpr double kStartupsToPay = 2;

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

uint64_t auto_max_jobs(uint64_t threads, uint64_t model_bytes, uint64_t available_bytes) {
  uint64_t cap = std::clamp<uint64_t>(threads, 1, 8);
  if (available_bytes > 0) {
    const double per_job = 250.0 * (1 << 20) + 4.0 * static_cast<double>(model_bytes);
    cap = std::min(cap, std::max<uint64_t>(1, static_cast<uint64_t>(0.75 * static_cast<double>(available_bytes) / per_job)));
  }
  return cap;
}

JobsDecision decide_jobs(const JobsMeasure& m) {
  JobsDecision d;
  if (!m.cpu) {
    d.why = "the scan runs on a GPU: one job";
    return d;
  }
  if (m.max_jobs < 2) {
    d.why = "one thread to use: one job";
    return d;
  }
  const double rest = m.step_seconds * static_cast<double>(m.remaining_steps);
  const std::string left = plural(m.remaining_steps, "step") + " left (" + fixed(rest, 1) + " s, " +
                           fixed(m.startup_seconds, 1) + " s per start-up)";
  if (rest < kStartupsToPay * m.startup_seconds) {
    d.why = left + ": one job, another would not pay for its start-up";
    return d;
  }
  uint64_t jobs = std::min(m.max_jobs, std::max<uint64_t>(m.remaining_steps, 1));
  if (m.rss_bytes > 0) {
    // Each job holds its own LibTorch, model and batch: keep a quarter of the memory free.
    const uint64_t fit = 1 + static_cast<uint64_t>(0.75 * static_cast<double>(m.available_bytes) / static_cast<double>(m.rss_bytes));
    jobs = std::min(jobs, fit);
  }
  if (jobs < 2) {
    d.why = left + ": one job, another job's memory (" + fixed(static_cast<double>(m.rss_bytes) / (1 << 20), 0) +
            " MiB) does not fit";
    return d;
  }
  d.jobs = jobs;
  d.why = left + ": " + std::to_string(jobs) + " jobs";
  return d;
}

}  // namespace batchcheck
