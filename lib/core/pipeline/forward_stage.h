#pragma once
// The forward stage's failure: a forward that raised becomes one finding over the whole batch,
// classified by what the error says and what the scan knows (the largest batch size that ran,
// the input's dtype, the model's BatchNorm modules). Pure: unit-tested on error strings.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/pipeline/backend.h"
#include "core/pipeline/value_findings.h"

namespace batchcheck {

struct ForwardFailureContext {
  uint64_t batch_size = 0;
  uint64_t largest_ok_batch = 0;  // 0 when no forward has succeeded yet
  std::string input_dtype;        // empty when the input's meta is unknown
  std::vector<std::string> batchnorm_modules;
  bool trains_exported = false;  // model.trains_exported
};

// batch-out-of-memory for an allocation that failed while `what` ran on a batch of n ("forward",
// "the loss", "loss.backward()", "checking the prediction"), with the bytes it asked for.
Emitted out_of_memory_finding(const std::string& what, const std::string& error, uint64_t n);

// id "cuda-device-assert" means the device is lost: nothing after it can run. A .pt2 program's
// refusal of a batch of one that only torch.export's specialization of sizes 0 and 1 causes is
// "export-batch-specialized" (about the program, a warning) unless training runs the program.
Emitted forward_failure(const ForwardResult& fwd, const ForwardFailureContext& ctx);

// trace-frozen-shape: a forward that failed on a shape a trace froze into its graph (the
// failing op's constant shape, `frozen`) instead of the model's own code; `failed` is what
// forward_failure made of it, whose evidence it keeps.
// batch-unchecked: a batch no capture of the user's code could run as their code does (told by
// batchcheck.scan(), `why`), so nothing of it was checked: an error, never a silent pass.
Emitted unchecked_batch_finding(const std::string& why, uint64_t batch_size);

Emitted frozen_shape_finding(const FrozenShape& frozen, const Emitted& failed, uint64_t batch_size);

// A BatchNorm error told with the layer whose check raised it ("BatchNorm layer4.1.bn2
// (BatchNorm2d) saw one value per channel"): evidence "module", "module_type".
void name_raising_module(Emitted& e, const std::string& module, const std::string& type);

// A forward failure classified again with the whole scan's largest successful batch, which a
// process that ran only some of the steps (--jobs, --shard) may not have seen: a shape error
// at the tail is `hardcoded-batch-size` however the steps were dealt. nullopt: unchanged.
std::optional<Emitted> reclassify_forward_failure(const std::string& id, const nlohmann::ordered_json& evidence,
                                                  uint64_t batch_size, uint64_t largest_ok_batch,
                                                  const std::vector<std::string>& batchnorm_modules);

}  // namespace batchcheck
