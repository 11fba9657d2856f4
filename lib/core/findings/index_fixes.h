#pragma once
// The fixes of an index past its bound (a class index in a loss, a token id in an embedding),
// wherever it was found: the loss's contract, the user's step, a loss inside forward. Fixes of
// its kind only: a class index never gets a value range's clamp.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/report/report.h"

namespace batchcheck {

// "F.cross_entropy(..., ignore_index=255)", or F.nll_loss's, from the op that was given it.
std::string ignore_index_call(const std::string& op, const std::string& value);

// A label `value` of `classes` classes: remapping first where it is the off-by-one (value ==
// classes: classes numbered from 1, unless the `smallest` label seen is 0: then the model is one
// class short, said first), then `ignore` (its ignore_index; "" where the loss takes none),
// which says that it drops those samples.
void class_index_fixes(std::vector<Fix>& fixes, double value, double classes, const std::string& ignore,
                       std::optional<double> smallest = std::nullopt);

// A class index given to a loss inside a library's forward (torchvision's detection heads): no
// ignore_index is the user's to pass there; the model's classes widened to the label, or the
// label remapped.
void library_class_index_fixes(std::vector<Fix>& fixes, double value, double classes);

// Whether an op's location (File "...") is an installed library's code, not the user's.
bool library_location(const std::string& location);

// A token id `value` past an embedding of `bound` rows (`module`: its name, may be ""): the
// vocabulary checked against the embedding, the embedding resized, unknown ids mapped; a
// negative id mapped to the pad token.
void token_id_fixes(std::vector<Fix>& fixes, int64_t value, int64_t bound, const std::string& module);

// An index `value` past the `size` of the dimension gather/scatter reads (a DQN's action past
// its Q-head's outputs): the layer that makes that dimension widened, or the rows filtered.
void dimension_index_fixes(std::vector<Fix>& fixes, int64_t value, int64_t size);

}  // namespace batchcheck
