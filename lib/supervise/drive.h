#pragma once
// Inside the supervisor: one supervised replay (the whole scan, a shard, or one of --jobs'
// parts) driven to its end through engine children, and the --jobs runner built on it.
#include <atomic>
#include <cstddef>
#include <ostream>
#include <memory>
#include <string>
#include <sys/types.h>
#include <thread>

#include "core/journal/aggregate.h"
#include "core/journal/journal.h"
#include "supervise/supervisor.h"

namespace batchcheck {

constexpr std::size_t kMaxJobs = 64;

// The engine child's stderr and stdout, read on a thread of their own (a child never waits on
// a full pipe, whatever the watcher does) and relayed line by line into the log
// (relay_child_line: its records with their level and source, anything else the engine's).
class OutputRelay {
 public:
  explicit OutputRelay(int fd);
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;
  // After the child is reaped: what it wrote is relayed, then the thread ends (within ~0.1 s
  // where a process it started still holds the pipe open).
  void finish();

 private:
  void run();
  int fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// An engine child started (LibTorch loading) before it is given its request.
struct EngineChild {
  pid_t pid = -1;
  int events = -1;   // the journal's read end
  int request = -1;  // the request's write end, until sent
  std::shared_ptr<OutputRelay> output;
};
EngineChild start_engine_child(const SupervisorOptions& opt);
// Kills and reaps a child that was never given a request.
void discard_engine_child(EngineChild& child);
// Whether it is still running (not reaped: it may still be handed its request).
bool engine_child_alive(const EngineChild& child);
// Writes the request on the child's fd 3 and closes it (a child that died already: its exit
// status says how).
void send_request(EngineChild& child, const std::string& request);
// A stack or address-space limit small enough to crash LibTorch, said in the error ("" if none).
std::string limits_note();

struct DriveResult {
  ScanEnd end;
  bool loaded = true;  // false: interrupted while loading the model and the data
};

// Runs engine children for `request` until the replay finishes, feeding `agg`: a child that
// crashes or overruns becomes the open step's finding and a fresh child resumes. `slot`:
// the job's place (its child is job_child(slot)); `started`, a child to use first. Throws
// InputError for unusable input.
DriveResult drive(const ScanCommand& cmd, const Config& cfg, Aggregator& agg, const SupervisorOptions& opt,
                  EngineRequest& request, std::size_t slot, EngineChild started = {});

// The engine child of a job now (0: none).
pid_t job_child(std::size_t slot);
// Stops every job's child (another job failed).
void abort_jobs();
// SIGINT/SIGTERM received (0: none).
int stop_signal();

// `scan --jobs` (and its default): the scan as several engine children on this machine, each
// replaying every J-th step, merged in step order into the report one child would write.
ScanOutcome run_jobs(const ScanCommand& cmd, const Config& cfg, std::ostream& out, std::ostream& err,
                     const SupervisorOptions& opt);

}  // namespace batchcheck
