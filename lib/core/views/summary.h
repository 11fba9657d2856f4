#pragma once
// The human summary on stderr after a scan: a view of its result, every untrusted string escaped.
#include <string>

#include "core/scan/scan.h"

namespace batchcheck {

// The human summary printed on stderr after a scan.
std::string format_summary(const ScanResult& result);

}  // namespace batchcheck
