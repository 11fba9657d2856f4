#pragma once
// What the loss ops inside the user's own training step (loss.type "step"), or inside a model
// run eagerly, were given, read from their arguments where they ran
// (engine/localize/argument_check.h, python/batchcheck/_eager.py), as findings: BCE's input or
// target outside [0, 1] or not finite, a class index past the classes, a token id past an
// embedding. Each names the op, the user's line and the rows. Pure.
#include <cstdint>
#include <vector>

#include "core/pipeline/backend.h"
#include "core/pipeline/value_findings.h"

namespace batchcheck {

// One finding per fault, in the order the ops ran; `in_step`: found in the user's step (else in
// the model's forward run eagerly, a loss computed inside it).
std::vector<Emitted> op_fault_findings(const std::vector<OpFault>& faults, uint64_t batch, bool in_step = true);

// "File "vae.py", line 42" of an op, or "" where the archive keeps no file.
std::string op_location(const OpSite& s);

}  // namespace batchcheck
