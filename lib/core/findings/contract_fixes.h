#pragma once
// The fixes of an op's own contract, broken inside a step or forward (core/pipeline/op_faults):
// ctc_loss's lengths, labels and blank; pack_padded_sequence's empty samples. Each names the
// repair of the data first, the op's option (with its trade-off) after.
#include "core/report/report.h"

namespace batchcheck {

// Appends the fixes for a finding whose evidence names an op contract ("contract") or whose
// error is one of those ops' (an empty sample given to pack_padded_sequence); false where the
// finding is none of those (its fixes are the general ones).
bool contract_fixes(Finding& f);

}  // namespace batchcheck
