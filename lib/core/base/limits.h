#pragma once
// Bounds shared by the layers that read a world size: the config, a recorded order, the plan.
#include <cstdint>
#include <string>

namespace batchcheck {

// The most DDP ranks a scan replays (loader.world_size, a recorded order's ranks). The replay
// checks every rank and keeps state for each (its place in the step order, its series), so
// a world size sizes memory; 2^20 is far above any data-parallel job run. The geometry itself
// is O(1) for any 64-bit world size (`suggest` takes them).
constexpr uint64_t kMaxWorldSize = uint64_t{1} << 20;

// "at most 1048576 ranks (2^20), got N: ...": the error text for a world size above it.
std::string world_size_too_large(uint64_t ranks);

}  // namespace batchcheck
