#include "scan_entry.h"

namespace batchcheck {
ScanOutcome run_scan_entry(const ScanCommand& cmd, std::ostream& out, std::ostream& err) {
  return scan_command(cmd, out, err);
}
}  // namespace batchcheck
