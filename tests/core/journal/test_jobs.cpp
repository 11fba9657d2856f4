// --jobs' default: one job, split when the first job's measured steps say the rest pays for
// more start-ups and memory allows; the same thread share for every process whatever it decides.
#include <gtest/gtest.h>

#include "core/journal/jobs.h"

using namespace batchcheck;

namespace {

JobsMeasure long_cpu_scan() {
  JobsMeasure m;
  m.max_jobs = 2;
  m.startup_seconds = 0.5;
  m.step_seconds = 0.01;
  m.remaining_steps = 1000;  // 10 s left
  m.rss_bytes = 400u << 20;
  m.available_bytes = uint64_t{16} << 30;
  return m;
}

}  // namespace

TEST(Jobs, ALongScanSplitsOverTheThreads) {
  JobsDecision d = decide_jobs(long_cpu_scan());
  EXPECT_EQ(d.jobs, 2u);
  EXPECT_EQ(d.why, "1000 steps left (10.0 s, 0.5 s per start-up): 2 jobs");
  JobsMeasure m = long_cpu_scan();
  m.max_jobs = 8;
  m.remaining_steps = 5;  // no more jobs than steps
  m.step_seconds = 1;
  EXPECT_EQ(decide_jobs(m).jobs, 5u);
}

TEST(Jobs, AShortRestStaysOneJob) {
  JobsMeasure m = long_cpu_scan();
  m.remaining_steps = 90;  // 0.9 s: less than 2 start-ups
  JobsDecision d = decide_jobs(m);
  EXPECT_EQ(d.jobs, 1u);
  EXPECT_EQ(d.why, "90 steps left (0.9 s, 0.5 s per start-up): one job, another would not pay for its start-up");
  m.remaining_steps = 110;  // 1.1 s: two jobs take 0.5 + 0.6 / 2 = 0.8 s
  EXPECT_EQ(decide_jobs(m).jobs, 2u);
}

TEST(Jobs, MemoryBoundsTheJobs) {
  JobsMeasure m = long_cpu_scan();
  m.max_jobs = 8;
  m.rss_bytes = uint64_t{4} << 30;
  m.available_bytes = uint64_t{12} << 30;  // 3/4 of it holds 2 more
  EXPECT_EQ(decide_jobs(m).jobs, 3u);
  m.available_bytes = uint64_t{4} << 30;  // no room for a second copy
  JobsDecision d = decide_jobs(m);
  EXPECT_EQ(d.jobs, 1u);
  EXPECT_EQ(d.why, "1000 steps left (10.0 s, 0.5 s per start-up): one job, another job's memory (4096 MiB) does not fit");
}

TEST(Jobs, OneGpuOrOneThreadIsOneJob) {
  JobsMeasure m = long_cpu_scan();
  m.cpu = false;
  EXPECT_EQ(decide_jobs(m).jobs, 1u);
  EXPECT_EQ(decide_jobs(m).why, "the scan runs on a GPU: one job");
  m = long_cpu_scan();
  m.max_jobs = 1;
  EXPECT_EQ(decide_jobs(m).jobs, 1u);
}

TEST(Jobs, EveryProcessGetsTheSameThreadShare) {
  EXPECT_EQ(auto_max_jobs(1), 1u);
  EXPECT_EQ(auto_max_jobs(2), 2u);
  EXPECT_EQ(auto_max_jobs(64), 8u);
  EXPECT_EQ(threads_per_job(2, 2), 1u);
  EXPECT_EQ(threads_per_job(2, 3), 1u);  // never zero
  EXPECT_EQ(threads_per_job(64, auto_max_jobs(64)), 8u);
  EXPECT_EQ(threads_per_job(7, 2), 3u);
  // A 10 GB model with 32 GB free: 2 jobs of 32 threads on a 64-core machine, not 8 of 8.
  const uint64_t gb = uint64_t{1} << 30;
  EXPECT_EQ(auto_max_jobs(64, 10 * gb, 32 * gb), 1u);
  EXPECT_EQ(auto_max_jobs(64, 2 * gb, 32 * gb), 2u);
  EXPECT_EQ(threads_per_job(64, auto_max_jobs(64, 2 * gb, 32 * gb)), 32u);
  EXPECT_EQ(auto_max_jobs(2, 50 << 20, 20 * gb), 2u);  // a small model on this machine
}
