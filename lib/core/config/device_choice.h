#pragma once
// Which GPU "cuda" means. Under a launcher (torchrun's LOCAL_RANK, SLURM's SLURM_LOCALID) each
// process of a node trains on its local rank's GPU, counted within CUDA_VISIBLE_DEVICES: a
// scan sharded with --shard env under the same launcher takes the same one, instead of every
// shard taking cuda:0. An index given ("cuda:3") is the user's. Pure: the environment and the
// device count are arguments.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace batchcheck {

struct LocalRank {
  uint64_t index = 0;
  std::string source;  // "torchrun (LOCAL_RANK)"
};

// The launcher's local rank of this process, if one set it (InputError on a value that is no
// number, naming the variable).
std::optional<LocalRank> launcher_local_rank(const std::function<const char*(const char*)>& env);

struct DeviceChoice {
  std::string device;  // "cuda:1"
  std::string note;    // why that one, for the report ("" where the user named it)
};

// `device` as resolved ("cuda", "cuda:N"), with `visible` GPUs. More local ranks than GPUs
// share them round-robin (two shards on one GPU both take cuda:0), as the note says.
DeviceChoice choose_cuda_device(const std::string& device, const std::optional<LocalRank>& local, uint64_t visible);

}  // namespace batchcheck
