#pragma once
// The supervisor's protocol, both directions as JSON. The parent sends the engine child one
// request (the scan command and where to resume); the child answers with one JSON line
// per event (core/scan/scan_events.h), plus which input it is loading and, on failure, the
// error. Everything crossing is data: a child that dies mid-line leaves a line the parent
// ignores.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/scan/command.h"
#include "core/scan/replay.h"
#include "core/scan/scan_events.h"

namespace batchcheck {

struct EngineRequest {
  ScanCommand command;
  ReplayResume resume;
};
std::string encode_request(const EngineRequest& r);
// Throws InternalError on a malformed request (it only ever comes from the parent).
EngineRequest decode_request(const std::string& text);

// Writes events to a file descriptor, one line each. A write that fails (the parent is
// gone) ends the child: nobody is left to read what it finds.
class JournalWriter : public ScanSink {
 public:
  explicit JournalWriter(int fd) : fd_(fd) {}
  // Collects the lines instead (a shard's partial report keeps its committed journal).
  explicit JournalWriter(std::vector<nlohmann::ordered_json>* into) : into_(into) {}
  void start(const ScanStart& s) override;
  void begin(const StepInfo& s, const std::vector<int64_t>& indices) override;
  void record(RecordEvent&& r) override;
  void end(const StepEnd& e) override;
  void localizing(const StepInfo& s) override;
  void cause(CauseEvent&& c) override;
  void split(uint64_t jobs, uint64_t from) override;
  void finish(const ScanEnd& e) override;
  // Which input file the child is about to read (a crash while loading names it).
  void loading(const std::string& file);
  // An error that ends the scan: "input" (exit 2) or "internal" (exit 3).
  void error(const std::string& kind, const std::string& file, const std::string& where, const std::string& what);

 private:
  void write(const nlohmann::ordered_json& j);
  int fd_ = -1;
  std::vector<nlohmann::ordered_json>* into_ = nullptr;
};

// What a journal line said, beyond the ScanSink calls it made.
struct JournalLine {
  enum class Kind { Event, Loading, Error, Malformed } kind = Kind::Event;
  std::string error_kind, file, where, what;  // Loading: file; Error: all four
};
JournalLine apply_journal_line(const std::string& line, ScanSink& sink);
// The same for a line already parsed (a partial report's committed journal).
JournalLine apply_journal_json(const nlohmann::ordered_json& line, ScanSink& sink);

}  // namespace batchcheck
