#pragma once
// `batchcheck merge`: a sharded scan's parts, each checked (core/journal/shard_check.h), joined
// in step order into the report one process would have written.
#include <ostream>
#include <string>
#include <vector>

#include "core/report/report.h"
#include "core/scan/scan.h"

namespace batchcheck {

// `batchcheck merge PART... -o REPORT`: the parts checked and merged. Throws InputError
// naming a part that is unreadable, foreign, from another setup, a shard given twice or a
// shard missing.
struct MergeInput {
  std::vector<std::string> parts;
  FailOn fail_on = FailOn::Error;
  // Where set: the files besides the parts that merge read (the recorded order the parts'
  // config names), which no output may replace.
  std::vector<std::string>* files_read = nullptr;
};
ScanResult merge_parts(const MergeInput& in, std::ostream& log);

}  // namespace batchcheck
