// A property of the whole load path, through the supervised binary: a TorchScript archive or a
// torch.save file with corrupted bytes or cut short ends as exit 0, 1 or 2 with one line —
// never a signal, a hang or exit 3. Deterministic mutations of real files (a scripted model,
// torch.save outputs of torch 1.13 and 2.15 from the fuzz corpus).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/workspace.h"

using namespace batchcheck;
using namespace batchcheck::test_util;

namespace {

const std::string kBin = BATCHCHECK_BINARY_DIR "/app/batchcheck";

std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& p, const std::string& b) { std::ofstream(p, std::ios::binary) << b; }

// Mutation k of `original`: k < 8 cuts the file short, the rest overwrite a few bytes at
// positions drawn from a fixed LCG.
std::string mutate(const std::string& original, unsigned k) {
  std::string b = original;
  if (k < 8) {
    b.resize(b.size() * (k + 1) / 9);
    return b;
  }
  uint64_t state = 0x9e3779b97f4a7c15ull * (k + 1);
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (int i = 0; i < 4; ++i) b[next() % b.size()] = static_cast<char>(next() & 0xff);
  return b;
}

struct Outcome {
  int code;
  std::string err;
};

Outcome scan(const std::string& cfg, const std::string& dir) {
  const std::string log = dir + "/err.log";
  CommandResult r = run_command("ASAN_OPTIONS=detect_leaks=0 timeout 120 '" + kBin + "' scan '" + cfg + "' -q -o '" + dir +
                                "/report.json' 2>'" + log + "'");
  return {r.status, read_bytes(log)};
}

void expect_clean_end(const Outcome& o, const std::string& what) {
  EXPECT_TRUE(o.code == 0 || o.code == 1 || o.code == 2) << what << ": exit " << o.code << "\n" << o.err;
  if (o.code == 2) {
    EXPECT_EQ(o.err.rfind("batchcheck: error: ", 0), 0u) << what << "\n" << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << what << "\n" << o.err;
  }
}

}  // namespace

TEST(Mutations, CorruptTorchScriptArchivesEndCleanly) {
  Workspace w("mut-model");
  w.inputs(8, 3).float_targets(std::vector<float>(8, 0.0f))
      .model("def forward(self, x):\n    return torch.relu(x @ self.w).sum(1, keepdim=True)\n", {ParamSpec{"w", {3, 3}, std::vector<float>(9, 0.5f), false}});
  const std::string cfg = w.write_config();
  const std::string model = w.file("m.pt"), original = read_bytes(model);
  const std::string dir = std::filesystem::path(model).parent_path().string();
  ASSERT_EQ(scan(cfg, dir).code, 0);
  for (unsigned k = 0; k < 40; ++k) {
    write_bytes(model, mutate(original, k));
    expect_clean_end(scan(cfg, dir), "mutation " + std::to_string(k));
  }
}

TEST(Mutations, CorruptTorchSaveFilesEndCleanly) {
  Workspace w("mut-data");
  w.model("def forward(self, x):\n    return x\n");
  const std::string dir = std::filesystem::path(w.file("m.pt")).parent_path().string();
  const std::string cfg = w.file("cfg.json");
  std::ofstream(cfg) << R"({"model": {"path": "m.pt"}, "data": {"path": "d.pt"}, "loader": {"batch_size": 2},
                          "loss": {"type": "none"}, "checks": {"probe_batch_sizes": []}})";
  for (const char* name : {"dict_t113.pt", "dict_t215.pt", "tuple_t215.pt", "views_t113.pt"}) {
    const std::string original = read_bytes(std::string(BATCHCHECK_SOURCE_DIR "/tests/fuzz/corpus/pickle_check/") + name);
    ASSERT_FALSE(original.empty()) << name;
    for (unsigned k = 0; k < 12; ++k) {
      write_bytes(w.file("d.pt"), mutate(original, k));
      expect_clean_end(scan(cfg, dir), std::string(name) + " mutation " + std::to_string(k));
    }
  }
}
