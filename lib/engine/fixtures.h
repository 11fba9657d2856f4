#pragma once
// Building TorchScript models from TorchScript source in C++ (torch::jit::Module::define),
// for the bundled samples and the tests: no Python needed. No torch types here.
#include <cstdint>
#include <string>
#include <vector>

namespace batchcheck {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // row-major; empty: zeros
  bool buffer = false;        // a buffer (running statistics): no gradient
};

struct ModuleSpec {
  std::string type_name;  // e.g. "BatchNorm2d": shows up in named_modules() as the class name
  std::string source;     // TorchScript: "def forward(self, x): ..."
  std::vector<ParamSpec> params;
  std::vector<std::pair<std::string, ModuleSpec>> children;  // submodules, by attribute name
};

// Defines the module and writes it with torch.jit.save's format.
void save_module(const std::string& path, const ModuleSpec& spec);

// One value of a torch.save'd dict: a float32 zero tensor of `shape`, or (is_tensor false)
// the integer 7, for files that are not what batchcheck expects.
struct PtEntry {
  std::string key;
  std::vector<int64_t> shape;
  bool is_tensor = true;
};

// Writes what Python's torch.save({key: value, ...}) writes (the zip format); as_tuple
// writes a tuple of the values instead of a dict.
void save_pt(const std::string& path, const std::vector<PtEntry>& entries, bool as_tuple = false);

// A deterministic stream of pseudo-random numbers (xorshift64*): the same bytes on
// every machine, independent of LibTorch's generators.
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : state_(seed * 2654435761u + 1) {}
  uint64_t next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 2685821657736338717ull;
  }
  float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1u << 24); }  // [0, 1)
  float normal();

 private:
  uint64_t state_;
};

// Writes the bundled sample models and data into `dir` (sample_configs/generated).
void generate_samples(const std::string& dir);

}  // namespace batchcheck
