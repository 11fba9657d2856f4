#pragma once
// Every finding id: its default severity and stage, what it means, the PyTorch/CUDA errors it
// stands for, typical causes and fixes. The report takes severities from here and `batchcheck
// explain` prints it, so the two never disagree; docs/findings.md is tested against it.
#include <string>
#include <vector>

#include "core/report/report.h"

namespace batchcheck {

struct FindingInfo {
  const char* id;
  Severity severity;  // the default; a probe at a size the loader never delivers is a warning
  const char* stage;
  const char* what;     // when it fires, one sentence
  const char* pytorch;  // what PyTorch raises for it, on CPU and CUDA ("" when it raises nothing)
  const char* causes;   // typical causes
  const char* fixes;    // the fix ids the report offers, typically
};

const std::vector<FindingInfo>& finding_catalog();
// nullptr for an unknown id.
const FindingInfo* find_finding(const std::string& id);
// The catalog's severity (error for an id it lacks: the tests keep every emitted id listed).
Severity default_severity(const std::string& id);

// `batchcheck explain ID`: the entry as text; without an id, every id with its severity and
// meaning. Throws InputError (with "did you mean") for an unknown id.
std::string explain_text(const std::string& id);
std::string explain_all_text();

}  // namespace batchcheck
