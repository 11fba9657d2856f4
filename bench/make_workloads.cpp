// Writes the benchmark workloads of issue 5 (deterministic; skipped when present):
//  p1: 200,000 x 32 float32, int64 labels in [0, 10), MLP 32->64->10, batch 64, cross_entropy
//  p2: 6,000 x 3 x 64 x 64 float32, {0,1} masks 1 x 64 x 64, conv(3->8,3x3)-ReLU-conv(8->1,1x1)-sigmoid, batch 32, bce
//  p1x4, p2x4: p1, p2 with 4x the samples (~10 s scans; p2x4: peak RSS must not grow with the dataset)
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/parse/npy.h"
#include "engine/fixtures.h"

using namespace batchcheck;
namespace fs = std::filesystem;

namespace {

std::vector<float> uniform(Lcg& rng, std::size_t n, float scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = (rng.uniform() * 2.0f - 1.0f) * scale;
  return v;
}

void write_config(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

void make_p1(const fs::path& dir, uint64_t n) {
  const uint64_t f = 32;
  Lcg rng(11);
  std::vector<float> x(n * f);
  for (auto& v : x) v = rng.normal();
  std::vector<int64_t> y(n);
  for (auto& v : y) v = static_cast<int64_t>(rng.next() % 10);
  write_npy((dir / "x.npy").string(), NpyDtype::Float32, {n, f}, x.data());
  write_npy((dir / "y.npy").string(), NpyDtype::Int64, {n}, y.data());
  save_module((dir / "model.pt").string(),
              ModuleSpec{"Mlp",
                         "def forward(self, x):\n"
                         "    h = torch.relu(torch.addmm(self.b1, x, self.w1))\n"
                         "    return torch.addmm(self.b2, h, self.w2)\n",
                         {{"w1", {32, 64}, uniform(rng, 32 * 64, 0.17f)},
                          {"b1", {64}, {}},
                          {"w2", {64, 10}, uniform(rng, 64 * 10, 0.12f)},
                          {"b2", {10}, {}}},
                         {}});
  write_config(dir / "config.json",
               R"({"model": {"path": "model.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"},
 "loader": {"batch_size": 64}, "loss": {"type": "cross_entropy"}})");
}

void make_p2(const fs::path& dir, uint64_t n) {
  Lcg rng(12);
  std::vector<float> img(n * 3 * 64 * 64);
  for (auto& v : img) v = rng.uniform();
  std::vector<float> mask(n * 64 * 64);
  for (auto& v : mask) v = rng.uniform() < 0.3f ? 1.0f : 0.0f;
  write_npy((dir / "x.npy").string(), NpyDtype::Float32, {n, 3, 64, 64}, img.data());
  write_npy((dir / "y.npy").string(), NpyDtype::Float32, {n, 1, 64, 64}, mask.data());
  save_module((dir / "model.pt").string(),
              ModuleSpec{"SegNet",
                         "def forward(self, x):\n"
                         "    y = torch.relu(torch.conv2d(x, self.w1, self.b1, [1, 1], [1, 1], [1, 1], 1))\n"
                         "    return torch.sigmoid(torch.conv2d(y, self.w2, self.b2, [1, 1], [0, 0], [1, 1], 1))\n",
                         {{"w1", {8, 3, 3, 3}, uniform(rng, 8 * 27, 0.3f)},
                          {"b1", {8}, {}},
                          {"w2", {1, 8, 1, 1}, uniform(rng, 8, 0.5f)},
                          {"b2", {1}, {}}},
                         {}});
  write_config(dir / "config.json",
               R"({"model": {"path": "model.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"},
 "loader": {"batch_size": 32}, "loss": {"type": "bce"}})");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: bench_make_workloads DIR\n";
    return 2;
  }
  const fs::path root(argv[1]);
  const struct {
    const char* name;
    void (*make)(const fs::path&);
  } workloads[] = {
      {"p1", [](const fs::path& d) { make_p1(d, 200000); }},
      {"p1x4", [](const fs::path& d) { make_p1(d, 800000); }},
      {"p2", [](const fs::path& d) { make_p2(d, 6000); }},
      {"p2x4", [](const fs::path& d) { make_p2(d, 24000); }},
  };
  for (const auto& w : workloads) {
    const fs::path dir = root / w.name;
    if (fs::exists(dir / "config.json")) continue;  // cached
    std::cerr << "bench: generating " << w.name << "\n";
    fs::create_directories(dir);
    w.make(dir);
  }
  return 0;
}
