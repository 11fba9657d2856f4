#pragma once
// How many engine processes a scan on this machine uses (`scan --jobs`). Without an
// optimizer step batches are independent, so J replicas each replaying every J-th step
// finish in about 1/J of the time: LibTorch's intra-op threads scale far less than that on
// the small ops of most training batches (bench/jobs.cpp measures both). The default gives
// every process the same share of the threads whatever it decides (LibTorch's reductions
// round differently with other thread counts: the report must not depend on the decision),
// starts one, and splits when the first job's measured steps say the rest is long enough to
// pay for more start-ups and memory allows; the first job goes on as one of them without a
// pause (ScanSink::split). Pure, tested here.
#include <cstdint>
#include <string>

namespace batchcheck {

struct JobsMeasure {
  bool cpu = true;              // the scan runs on the CPU (one GPU takes one job)
  uint64_t max_jobs = 1;        // auto_max_jobs()
  double startup_seconds = 0;   // start of the engine child to its first ended step
  double step_seconds = 0;      // per step since then
  uint64_t remaining_steps = 0;
  uint64_t rss_bytes = 0;       // the first job's resident memory
  uint64_t available_bytes = 0; // MemAvailable
};

struct JobsDecision {
  uint64_t jobs = 1;
  std::string why;  // for -v: "400 steps left (12.0 s, 0.6 s per start-up): 2 jobs"
};

// The most jobs the default may split into, fixed before it starts (the threads' share follows
// from it): one per thread of the budget, at most 8, and no more than `available_bytes` (when
// known) holds with a quarter kept free, at LibTorch's own ~250 MB plus 4x the model file per
// job. A big model on a big machine gets fewer jobs with more threads each.
uint64_t auto_max_jobs(uint64_t threads, uint64_t model_bytes = 0, uint64_t available_bytes = 0);

JobsDecision decide_jobs(const JobsMeasure& m);

// Intra-op threads for each of `jobs` processes sharing `threads`.
inline uint64_t threads_per_job(uint64_t threads, uint64_t jobs) { return jobs && threads > jobs ? threads / jobs : 1; }

}  // namespace batchcheck
