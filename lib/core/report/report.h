#pragma once
// The report of SPEC.md: findings with their fixes, the verdict and the JSON form.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace batchcheck {

enum class Severity { Info = 0, Warning = 1, Error = 2 };
const char* to_string(Severity s);

// --fail-on: the lowest severity that fails the gate; Never passes everything.
enum class FailOn { Info, Warning, Error, Never };
const char* to_string(FailOn f);
std::optional<FailOn> parse_fail_on(const std::string& s);
bool fails(Severity s, FailOn level);

struct Fix {
  std::string id;
  std::string title;
  std::string code;
  std::string tradeoff;
  std::vector<uint64_t> batch_sizes;  // concrete sizes, for the batch-size fixes
  std::vector<int64_t> indices = {};  // reproduce: the batch's samples, where too many to list in the code
  // What batchcheck.scan() ran with this fix applied and saw pass ("batch 5 runs with
  // batch_size=32"); empty: not tried.
  std::string verified = {};
};

// One batch (or one probe) where a finding occurred: its samples are never merged with
// another batch's or rank's.
struct Occurrence {
  std::optional<uint64_t> rank, batch;
  std::vector<int64_t> samples;  // dataset indices concerned in this batch, capped
  uint64_t count = 0;            // samples concerned in this batch
  // The files behind this batch's samples, when the finding is about files
  // (sample-unreadable): [{"file", "error"}].
  nlohmann::ordered_json files;
  // This batch's own message, when it differs from the finding's (the first batch's): two
  // batches may fail forward for different reasons (a bad box, then a bad label).
  std::string message;
  // Where this batch's bad value came from, when localized (null otherwise).
  nlohmann::ordered_json root_cause;
};

struct Finding {
  std::string id;
  Severity severity = Severity::Info;
  std::optional<uint64_t> rank;
  std::vector<uint64_t> ranks;  // every rank it applies to, when more than one
  std::optional<uint64_t> batch;
  std::vector<uint64_t> batches;
  std::vector<int64_t> samples;  // dataset indices, first occurrences, capped
  uint64_t count = 0;            // total samples concerned
  std::string stage;             // "geometry", "data", "forward", "output", "loss"
  std::string message;
  nlohmann::ordered_json evidence = nlohmann::ordered_json::object();
  std::string cuda_equivalent;
  std::vector<Fix> fixes;
  bool probe = false;
  uint64_t probe_size = 0;               // the probe's batch size, for probe findings
  std::vector<Occurrence> occurrences;   // the first kOccurrenceCap, in (rank, batch) order
  uint64_t occurrences_total = 0;
  // Where the bad value came from, when known (null otherwise): {"kind", "summary", ...}.
  nlohmann::ordered_json root_cause;
};

constexpr std::size_t kOccurrenceCap = 32;

nlohmann::ordered_json to_json(const Fix& f);
nlohmann::ordered_json to_json(const Finding& f);
// The inverse of to_json, for a saved report's views (`render --text`); throws
// nlohmann::json::exception on fields of other types than batchcheck writes.
Finding finding_from_json(const nlohmann::ordered_json& j);

struct SeverityCounts {
  uint64_t errors = 0, warnings = 0, infos = 0;
};
SeverityCounts count_severities(const std::vector<Finding>& findings);

// The verdict: "fail" if any finding is at or above the level.
bool verdict_fails(const std::vector<Finding>& findings, FailOn level);

}  // namespace batchcheck
