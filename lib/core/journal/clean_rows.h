#pragma once
// A partial report's clean steps (no findings) as compact text rows, one per step: a scan of
// 10^6 batches writes one string instead of 10^6 JSON objects, and `merge` reads it without a
// JSON tree per step. Numbers round-trip exactly (shortest form), so the merged report equals
// the unsharded one byte for byte.
#include <optional>
#include <string>
#include <vector>

#include "core/journal/step_log.h"

namespace batchcheck {

// The fields of a row, in order; a partial report names them so a reader of another layout
// refuses it instead of misreading it.
extern const char* const kCleanColumns;

// Steps without shapes, in the order given (a step's shapes go with its journal lines).
std::string encode_clean_rows(const std::vector<const CleanStep*>& steps);

// Throws InputError(from, "clean", "row N: ...") at a malformed row. `escaped`: the rows as
// they stand in the file, each ending in the two characters \n (take_clean_rows).
std::vector<CleanStep> decode_clean_rows(const std::string& rows, const std::string& from, bool escaped = false);

// The rows string cut out of a partial report's text as make_partial lays it out (the last
// member), leaving `"rows":""`, so the JSON parser never copies it character by character;
// nullopt, the text untouched, when it is laid out otherwise (edited: parse it whole).
std::optional<std::string> take_clean_rows(std::string& text);

}  // namespace batchcheck
