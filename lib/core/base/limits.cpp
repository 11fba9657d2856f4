#include "core/base/limits.h"

#include "core/base/json_input.h"

namespace batchcheck {

std::string world_size_too_large(uint64_t ranks) {
  return "at most " + std::to_string(kMaxWorldSize) + " ranks (2^20), got " + std::to_string(ranks) +
         ": the replay checks every rank and keeps state for each, at least 8 bytes a rank for the list of ranks alone (" +
         format_bytes(static_cast<long double>(ranks) * 8) + " here)";
}

}  // namespace batchcheck
