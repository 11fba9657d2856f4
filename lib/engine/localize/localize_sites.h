#pragma once
// Where an op of an inlined TorchScript graph comes from, in the user's words: its module path,
// and the file and line of the user's own call (through torch's own code, from the archive's
// debug records, or a traced op's recorded Python stack: named, never opened). Engine-internal.
#include <string>

#include <torch/csrc/jit/ir/ir.h>

#include "core/findings/root_cause.h"

namespace batchcheck {

OpSite op_site(const torch::jit::Node* n);
// The instance names of the calls an inlined node came through: "layer1.0.bn1".
std::string module_path(const torch::jit::Node* n);
// Whether the op was recorded by torch.jit.trace (its source is the tracer's Python stack), not
// compiled from code: a constant it takes may be a size the trace froze.
bool traced_op(const torch::jit::Node* n);
// A graph input's debug name without the ".N" suffix TorchScript adds where it renamed one.
std::string argument_name(const torch::jit::Value* v);

}  // namespace batchcheck
