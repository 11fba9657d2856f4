#include "core/pipeline/blame_stage.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "core/base/text.h"
#include "core/findings/fixes.h"
#include "core/pipeline/classify.h"

namespace batchcheck {

namespace {

// An error's kind across batch sizes: its id, where it was raised, and its text without
// numbers ("shape '[16, -1]' is invalid for input of size 80" is the same error at 48).
std::string signature(const ForwardResult& r) {
  std::string text;
  for (char c : r.error) {
    if (!std::isdigit(static_cast<unsigned char>(c))) text += c;
  }
  return classify_forward_error(r.error, 0, 0) + "|" + r.location + "|" + text;
}

class Search {
 public:
  Search(const RunRows& run, uint64_t budget) : run_(run), budget_(budget) {}

  // The outcome of forward on `rows`: 1 fails alike, 0 runs, -1 fails otherwise, -2 cannot say.
  int test(std::vector<uint64_t> rows) {
    std::sort(rows.begin(), rows.end());
    if (auto it = seen_.find(rows); it != seen_.end()) return it->second;
    if (forwards >= budget_) return -2;
    ++forwards;
    const std::optional<ForwardResult> r = run_(rows);
    const int v = !r ? -2 : r->ok ? 0 : signature(*r) == reference ? 1 : -1;
    if (!r) unusable = true;
    seen_[rows] = v;
    if (v == 0 && rows.size() > clean.size()) clean = rows;
    return v;
  }
  void known(std::vector<uint64_t> rows, int v) {
    std::sort(rows.begin(), rows.end());
    seen_[rows] = v;
  }
  bool spent() const { return unusable || forwards >= budget_; }

  // One row of `rows` (which fail alike) that can carry the error: halves while a half fails
  // alike, else goes on in the other half. nullopt when out of forwards.
  std::optional<uint64_t> candidate(std::vector<uint64_t> rows) {
    while (rows.size() > 1) {
      const auto mid = rows.begin() + static_cast<std::ptrdiff_t>(rows.size() / 2);
      std::vector<uint64_t> first(rows.begin(), mid), second(mid, rows.end());
      const int v = test(first);
      if (v == -2) return std::nullopt;
      rows = v == 1 ? std::move(first) : std::move(second);
    }
    return rows.front();
  }

  // Whether `row` fails alike among rows that ran together (the largest such set: rows clean
  // one by one may still fail together); -2 while none ran (a batch whose every part fails
  // alike cannot tell a guilty sample from a size).
  int in_clean_company(uint64_t row) {
    if (clean.empty()) return -2;
    if (std::find(clean.begin(), clean.end(), row) != clean.end()) return 0;  // it ran among them
    std::vector<uint64_t> company = clean;
    company.push_back(row);
    return test(company);
  }

  std::string reference;
  std::vector<uint64_t> clean;  // the largest set of rows that ran
  uint64_t forwards = 0;
  bool unusable = false;

 private:
  const RunRows& run_;
  uint64_t budget_;
  std::map<std::vector<uint64_t>, int> seen_;
};

std::vector<uint64_t> without(uint64_t batch, const std::vector<uint64_t>& guilty) {
  std::vector<uint64_t> rest;
  for (uint64_t r = 0; r < batch; ++r) {
    if (std::find(guilty.begin(), guilty.end(), r) == guilty.end()) rest.push_back(r);
  }
  return rest;
}

}  // namespace

uint64_t blame_budget(uint64_t batch) {
  uint64_t levels = 0;
  while ((uint64_t{1} << levels) < batch) ++levels;
  return std::max<uint64_t>(2, 2 * levels);
}

bool blamable(const std::string& id) { return id == "forward-error" || id == "cuda-device-assert"; }

Blame blame_forward_error(const ForwardResult& failed, uint64_t batch, bool rerun_first, const RunRows& run,
                          const RunArguments& arguments) {
  Blame b;
  Search s(run, blame_budget(batch));
  std::vector<uint64_t> all = without(batch, {});
  ForwardResult reference = failed;
  std::optional<ArgumentRun> checked;
  if (arguments && (batch > 1 || rerun_first)) {
    ++s.forwards;
    checked = arguments();
    b.forwards = s.forwards;
    if (checked && !checked->result.ok) b.fault = checked->fault;
    if (checked && rerun_first) b.cpu = checked->result;
    if (b.fault && !b.fault->rows.empty()) {
      // The op raises exactly where its indices leave the bound: those rows, and no others.
      b.verdict = Blame::Verdict::Samples;
      b.rows = b.fault->rows;
      b.complete = true;
      return b;
    }
  }
  if (batch < 2) {
    if (b.cpu && b.cpu->ok) b.verdict = Blame::Verdict::CudaOnly;
    return b;
  }
  if (rerun_first) {
    if (!b.cpu) {
      ++s.forwards;
      b.cpu = run(all);
    }
    b.forwards = s.forwards;
    if (!b.cpu) return b;
    if (b.cpu->ok) {
      b.verdict = Blame::Verdict::CudaOnly;
      return b;
    }
    reference = *b.cpu;
  }
  s.reference = signature(reference);
  s.known(all, 1);
  // Culprits one at a time. A candidate is guilty where the batch without it (and the guilty
  // ones) runs: it then fails in the company of samples that run. Where that batch still fails
  // alike, the candidate is guilty only if it fails among samples known to run, and the search
  // goes on in the rest.
  std::vector<uint64_t> guilty;
  std::vector<uint64_t> failing = all;
  bool follows_none = false;  // a candidate failed only with others, or nothing was known to run
  while (!s.spent()) {
    const std::optional<uint64_t> c = s.candidate(failing);
    if (!c) break;
    std::vector<uint64_t> with_c = guilty;
    with_c.push_back(*c);
    std::vector<uint64_t> rest = without(batch, with_c);
    const int r = rest.empty() ? 0 : s.test(rest);
    if (r == -2) break;
    if (r != 1) {
      // The rest runs (or fails another way, a batch too small for BatchNorm, say).
      guilty = std::move(with_c);
      b.complete = r == 0;
      break;
    }
    const int company = s.in_clean_company(*c);
    if (company != 1) {
      follows_none = s.clean.empty() || company != -2;
      break;
    }
    guilty = std::move(with_c);
    failing = std::move(rest);
  }
  b.forwards = s.forwards;
  if (s.unusable && guilty.empty()) return b;
  if (!guilty.empty()) {
    std::sort(guilty.begin(), guilty.end());
    b.verdict = Blame::Verdict::Samples;
    b.rows = std::move(guilty);
    return b;
  }
  if (follows_none && !s.unusable) b.verdict = Blame::Verdict::NoSample;
  return b;
}

std::string index_fault_text(const OpFault& f) {
  const bool below = f.value < 0;
  std::string where = f.site.module.empty() ? f.site.op : f.site.module;
  if (!f.module_type.empty()) where += " (" + f.module_type + ")";
  return f.what + " " + std::to_string(f.value) + (below ? " < 0" : " >= " + f.bound_name + " " + std::to_string(f.bound)) +
         " of " + where;
}

void apply_blame(Emitted& e, const Blame& b, const std::vector<int64_t>& indices) {
  const uint64_t batch = indices.size();
  nlohmann::ordered_json ev = {{"forwards", b.forwards}};
  // Sentences follow with "; ": not after the error's own full stop.
  if (b.verdict != Blame::Verdict::Unknown || (b.cpu && !b.cpu->ok)) {
    while (!e.message.empty() && (e.message.back() == '.' || e.message.back() == ' ')) e.message.pop_back();
  }
  if (b.cpu && !b.cpu->ok) {
    // What CUDA's assert hid: the op's own error on the CPU, and the user's line.
    nlohmann::ordered_json cpu = {{"error", b.cpu->error}};
    if (!b.cpu->location.empty()) cpu["location"] = b.cpu->location;
    if (!b.cpu->source_line.empty()) cpu["source_line"] = b.cpu->source_line;
    if (!b.cpu->raised_in.empty()) cpu["raised_in"] = b.cpu->raised_in;
    e.evidence["cpu"] = cpu;
    if (!b.cpu->location.empty() && !e.evidence.contains("location")) {
      e.evidence["location"] = b.cpu->location;
      if (!b.cpu->source_line.empty()) e.evidence["source_line"] = b.cpu->source_line;
    }
    e.message += "; the same batch on the CPU raises: " + b.cpu->error +
                 (b.cpu->location.empty() ? "" : " (" + b.cpu->location + ")");
    if (e.cuda.empty()) e.cuda = cuda_equivalent_of_forward_error(b.cpu->error);
  }
  std::vector<int64_t> samples;
  for (uint64_t r : b.rows) {
    if (r < indices.size()) samples.push_back(indices[r]);
  }
  std::string named = samples.size() == 1 ? "sample " + std::to_string(samples[0])
                                          : "samples " + python_indices(std::vector<int64_t>(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(samples.size(), 8)))) +
                                                (samples.size() > 8 ? " (" + std::to_string(samples.size()) + " in all)" : "");
  if (b.fault) {
    const OpFault& f = *b.fault;
    nlohmann::ordered_json fault = {{"op", f.site.op}, {"module", f.site.module}, {"what", f.what}, {"value", f.value},
                                    {f.bound_name, f.bound}};
    if (!f.module_type.empty()) fault["module_type"] = f.module_type;
    e.evidence["index_fault"] = fault;
  }
  switch (b.verdict) {
    case Blame::Verdict::Samples:
      ev["verdict"] = "samples";
      ev["rows"] = b.rows;
      ev["complete"] = b.complete;
      e.rows = b.rows;
      e.total = b.rows.size();
      if (b.fault) {
        e.message += "; " + named + ": " + index_fault_text(*b.fault);
        break;
      }
      e.message += "; it follows " + named + " of the batch of " + std::to_string(batch) + ": " +
                   (b.complete ? "the batch without " + std::string(b.rows.size() == 1 ? "it" : "them") + " runs, and " : "") +
                   (b.rows.size() == 1 ? "it fails" : "each fails") + " among samples that run" +
                   (b.complete ? "" : " (the batch may hold more: the search stopped after " + plural(b.forwards, "forward") + ")");
      break;
    case Blame::Verdict::NoSample:
      ev["verdict"] = "no-sample";
      e.message += "; it follows no single sample: none fails among samples that run, so it depends on the batch (its size "
                   "of " + std::to_string(batch) + ", say) or on several samples together";
      break;
    case Blame::Verdict::CudaOnly:
      ev["verdict"] = "cuda-only";
      e.message += "; the same batch runs on the CPU: the assert is CUDA's own (a kernel, not the data)";
      break;
    case Blame::Verdict::Unknown:
      ev["verdict"] = "unknown";
      break;
  }
  e.evidence["blame"] = ev;
}

}  // namespace batchcheck
