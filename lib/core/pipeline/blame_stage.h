#pragma once
// Which samples a failed forward follows. A forward error names its whole batch; the error
// usually follows one sample (a token id past the embedding, a label past the classes), and
// sometimes none (a view(16, -1) fails on any batch of another size). Forwards on parts of the
// batch tell which: a sample is guilty only where the batch without it runs and the sample
// fails in clean company. After a device-side assert the batch first runs again on the CPU,
// whose error names the op and the line CUDA's assert cannot. Pure: the forwards come through
// a callback, so the search is unit-tested on fakes.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/findings/root_cause.h"
#include "core/pipeline/backend.h"
#include "core/pipeline/value_findings.h"

namespace batchcheck {

// Blamed batches per finding id: the first few say which samples; the rest would repeat the
// search at up to 2·log2(B) forwards each.
constexpr unsigned kBlamePerId = 3;

// Runs forward on these rows of the batch (in this order) on the CPU, or on the scan's device
// where it still works; nullopt where the backend cannot (the model is not re-runnable, or
// its inputs are not batched along their first dimension).
using RunRows = std::function<std::optional<ForwardResult>(const std::vector<uint64_t>& rows)>;

using RunArguments = std::function<std::optional<ArgumentRun>()>;

struct Blame {
  enum class Verdict {
    Unknown,    // could not re-run, or out of forwards before anything was sure
    Samples,    // `rows` are guilty (`complete`: the batch without them runs)
    NoSample,   // every part fails alike or none does: it follows the batch (its size), not a sample
    CudaOnly,   // the batch runs on the CPU: the assert is CUDA's own
  };
  Verdict verdict = Verdict::Unknown;
  std::vector<uint64_t> rows;
  bool complete = false;
  std::optional<ForwardResult> cpu;  // the batch's own re-run on the CPU, after a device-side assert
  std::optional<OpFault> fault;   // the op's arguments, where they show the cause
  uint64_t forwards = 0;
};

// The most forwards a batch of `batch` gets: 2·ceil(log2 B), at least 2.
uint64_t blame_budget(uint64_t batch);

// `failed`: what the batch's forward raised; `rerun_first`: the error came from a lost device
// (a device-side assert), so the whole batch runs first (on the CPU) to learn the real error.
// `arguments` (may be empty): that first run through the argument check, tried before the
// search; where an op's indices name the rows, those are the samples and no search runs.
Blame blame_forward_error(const ForwardResult& failed, uint64_t batch, bool rerun_first, const RunRows& run,
                          const RunArguments& arguments = {});

// "token id 100 >= num_embeddings 100 of emb (Embedding)".
std::string index_fault_text(const OpFault& f);

// Whether a forward failure of this id is searched for its samples.
bool blamable(const std::string& id);

// The finding told what the search found: its rows, its evidence ("blame", and after a
// device-side assert the CPU's error, op and line), and a sentence of its message naming the
// samples (`indices`: the batch's dataset indices, row by row).
void apply_blame(Emitted& e, const Blame& b, const std::vector<int64_t>& indices);

}  // namespace batchcheck
