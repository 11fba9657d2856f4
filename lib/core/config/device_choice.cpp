#include "core/config/device_choice.h"

#include "core/base/errors.h"
#include "core/base/text.h"

namespace batchcheck {

std::optional<LocalRank> launcher_local_rank(const std::function<const char*(const char*)>& env) {
  static const std::pair<const char*, const char*> launchers[] = {{"LOCAL_RANK", "torchrun (LOCAL_RANK)"},
                                                                 {"SLURM_LOCALID", "SLURM (SLURM_LOCALID)"}};
  for (const auto& [name, source] : launchers) {
    const char* v = env(name);
    if (!v) continue;
    const std::string s(v);
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
      throw InputError("", "--device", std::string(name) + "=\"" + single_line(s) +
                                           "\" is not a number: the launcher's local rank decides which GPU \"cuda\" is");
    }
    return LocalRank{std::stoull(s), source};
  }
  return std::nullopt;
}

DeviceChoice choose_cuda_device(const std::string& device, const std::optional<LocalRank>& local, uint64_t visible) {
  if (device != "cuda" || !local || visible == 0) return {device == "cuda" ? "cuda:0" : device, ""};
  const uint64_t index = local->index % visible;
  std::string note = "\"cuda\" is cuda:" + std::to_string(index) + ", the GPU of local rank " + std::to_string(local->index) +
                     " (" + local->source + ") among the " + plural(visible, "visible GPU");
  if (local->index >= visible) note += ": more local ranks than GPUs, so ranks share them";
  return {"cuda:" + std::to_string(index), note};
}

}  // namespace batchcheck
