// core/config/device_choice: "cuda" under a launcher is the local rank's GPU, counted within
// the visible ones; an index given is kept; ranks past the GPUs share them.
#include "core/config/device_choice.h"

#include <gtest/gtest.h>

#include <map>

#include "core/base/errors.h"

using namespace batchcheck;

namespace {

std::function<const char*(const char*)> env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    static thread_local std::string value;
    auto it = vars.find(name);
    if (it == vars.end()) return nullptr;
    value = it->second;
    return value.c_str();
  };
}

}  // namespace

TEST(DeviceChoice, TheLaunchersLocalRank) {
  EXPECT_FALSE(launcher_local_rank(env({})).has_value());
  auto torchrun = launcher_local_rank(env({{"LOCAL_RANK", "3"}, {"SLURM_LOCALID", "1"}}));
  ASSERT_TRUE(torchrun.has_value());
  EXPECT_EQ(torchrun->index, 3u);
  EXPECT_EQ(torchrun->source, "torchrun (LOCAL_RANK)");
  auto slurm = launcher_local_rank(env({{"SLURM_LOCALID", "1"}}));
  ASSERT_TRUE(slurm.has_value());
  EXPECT_EQ(slurm->index, 1u);
  EXPECT_EQ(slurm->source, "SLURM (SLURM_LOCALID)");
  try {
    launcher_local_rank(env({{"LOCAL_RANK", "two"}}));
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--device: LOCAL_RANK=\"two\" is not a number: the launcher's local rank decides which GPU \"cuda\" is");
  }
}

TEST(DeviceChoice, CudaIsTheLocalRanksGpu) {
  const DeviceChoice c = choose_cuda_device("cuda", LocalRank{5, "torchrun (LOCAL_RANK)"}, 8);
  EXPECT_EQ(c.device, "cuda:5");
  EXPECT_EQ(c.note, "\"cuda\" is cuda:5, the GPU of local rank 5 (torchrun (LOCAL_RANK)) among the 8 visible GPUs");
  // No launcher: the first GPU, as before; an index given is the user's.
  EXPECT_EQ(choose_cuda_device("cuda", std::nullopt, 8).device, "cuda:0");
  EXPECT_EQ(choose_cuda_device("cuda", std::nullopt, 8).note, "");
  EXPECT_EQ(choose_cuda_device("cuda:2", LocalRank{5, "x"}, 8).device, "cuda:2");
}

TEST(DeviceChoice, MoreRanksThanGpusShareThem) {
  // Two shards on a machine of one GPU both take it.
  EXPECT_EQ(choose_cuda_device("cuda", LocalRank{0, "torchrun (LOCAL_RANK)"}, 1).device, "cuda:0");
  const DeviceChoice c = choose_cuda_device("cuda", LocalRank{1, "torchrun (LOCAL_RANK)"}, 1);
  EXPECT_EQ(c.device, "cuda:0");
  EXPECT_EQ(c.note,
            "\"cuda\" is cuda:0, the GPU of local rank 1 (torchrun (LOCAL_RANK)) among the 1 visible GPU: more local ranks "
            "than GPUs, so ranks share them");
}
