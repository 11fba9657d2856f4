#pragma once
// Where a bad value was born (issue: root cause). The engine re-runs a failing batch through
// an instrumented copy of the model and says which operation first made a value NaN or Inf
// (or, for a prediction outside the loss's range, which one last took it out), with its
// module, source line and the statistics of what it was given; halving the batch says which
// samples cause it. This header is the torch-free result and what the report makes of it.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace batchcheck {

// What to localize in the current batch.
struct LocalizeRequest {
  bool nonfinite = false;               // the first NaN/Inf
  std::optional<double> lo, hi;         // the prediction's band: the op that took it out
  bool halve = false;                   // also the smallest set of rows that still fails
  bool peak = false;                    // the op whose float16/bfloat16 output held the largest |value|
  uint64_t batch = 0;                   // the batch's samples (rows of its tensors)
};

// A tensor an operation took or gave, summarized.
struct TensorSummary {
  std::string name;  // "input 0", the model's argument name, a parameter's qualified name
  std::vector<int64_t> shape;
  uint64_t elements = 0, nan = 0, pos_inf = 0, neg_inf = 0;
  uint64_t negative = 0, zero = 0, outside_unit = 0;  // finite values < 0, == 0, |x| > 1
  std::optional<double> min, max;                     // over the finite values
  uint64_t above = 0, below = 0;                      // finite values outside the request's band
};

// An operation of the model's graph as the user wrote it.
struct OpSite {
  std::string op;      // "aten::log"
  std::string module;  // "head.score" ("" for the model's own forward)
  std::string file;    // the original source file when the archive keeps it
  uint64_t line = 0;
  std::string source_line;
};

struct Localization {
  // "op": an operation made it; "input": a model input already held it; "parameter": a
  // parameter or buffer did; "" when the instrumented run saw nothing (the name says why).
  std::string origin;
  std::string kind;  // "nonfinite" or "range"
  OpSite site;
  std::string name;  // the input's or the parameter's name
  std::vector<TensorSummary> inputs;
  TensorSummary output;
  std::vector<OpSite> chain;  // the operations that carried it on, first few
  uint64_t chain_total = 0;
  std::optional<OpSite> inf_from;  // a NaN made from an Inf: the op that made the Inf
  uint64_t seq = 0;                // the value's place in the run (engine-internal order)
  // The rows of the batch where the first bad value appeared, when its tensor is batched
  // along its first dimension and only some rows are bad (engine-internal: halving checks it).
  std::vector<uint64_t> origin_rows;
  std::optional<double> lo, hi;
  // Halving: the smallest set of the batch's rows that still fails, and whether those rows
  // fail only together (a batch statistic), never alone.
  bool halved = false;
  std::vector<uint64_t> rows;
  bool batch_dependent = false;
  uint64_t forwards = 0;  // forwards the localization ran (instrumented + halving)
  // Half precision: the dtype of the op's output ("float16"), the largest |value| the same op
  // made on the same batch in float32 (unset: not finite there either), and for a peak
  // request the largest |value| it made in half precision.
  std::string dtype;
  std::optional<double> fp32_max, peak;
};

// Finds a smallest set of rows of a failing batch of `n` that still fails: halves while a
// half fails alone; when neither does, finds the rows needed one at a time (a binary search
// for the shortest prefix that still fails). More than one row left: they fail only together
// (batch-dependent). At most `max_forwards` calls of `fails` (out of them: the smallest
// failing set seen so far, not called batch-dependent); the batch itself is known to fail.
struct Halving {
  std::vector<uint64_t> rows;
  bool batch_dependent = false;
  uint64_t forwards = 0;
};
Halving halve_failing_rows(uint64_t n, const std::function<bool(const std::vector<uint64_t>&)>& fails,
                           uint64_t max_forwards = 48);

// "aten::linear at model.py:12 in head.fc", and the JSON of a site ({"op", "module", "file", "line"}).
std::string op_site_text(const OpSite& s);
nlohmann::ordered_json op_site_json(const OpSite& s);

// The report's `root_cause` ({"kind": "op", "summary": ..., ...}); null when nothing was
// localized. `indices`: the batch's dataset indices (rows → samples).
nlohmann::ordered_json root_cause_json(const Localization& l, const std::vector<int64_t>& indices);

// "first NaN: aten::log at model.py:42 in head.score, on log of 12 negative values; from sample 1040"
std::string root_cause_summary(const Localization& l, const std::vector<int64_t>& indices);

}  // namespace batchcheck
