#pragma once
// A scratch folder holding a model, .npy data and a config, scanned in-process through
// run_cli(): the building block of the end-to-end and bad-input tests.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "core/parse/npy.h"
#include "engine/fixtures.h"
#include "support/catalogued.h"
#include "support/test_helpers.h"

namespace batchcheck::test_util {

using Json = nlohmann::json;

// What torch.jit.trace records for nn.BatchNorm1d(channels): the ATen op, without the Python
// check that raises on one value per channel (running statistics as buffers).
inline ModuleSpec traced_batchnorm(int64_t channels) {
  const std::vector<int64_t> shape{channels};
  const std::vector<float> ones(static_cast<std::size_t>(channels), 1.0f);
  return {"BatchNorm1d",
          "def forward(self, x):\n"
          "    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,\n"
          "                            self.training, 0.1, 1e-5, False)\n",
          {{"weight", shape, ones}, {"bias", shape, {}}, {"running_mean", shape, {}, true}, {"running_var", shape, ones, true}},
          {}};
}

struct ScanRun {
  int code = -1;
  Json report;
  std::string err;
};

class Workspace {
 public:
  // Writes the config (as scan() would) without scanning.
  std::string write_config() {
    std::ofstream(dir_.file("cfg.json")) << "{\"model\": {\"path\": \"m.pt\"}, \"data\": {\"inputs\": \"x.npy\""
                                         << (has_targets_ ? ", \"targets\": \"y.npy\"" : "") << "}, \"loader\": " << loader_
                                         << ", \"loss\": " << loss_ << ", \"checks\": " << checks_ << "}";
    return dir_.file("cfg.json");
  }

  explicit Workspace(const std::string& tag) : dir_(tag) {}

  // Inputs (n, f) float32 with values from `fill(i, j)`.
  template <typename F>
  Workspace& inputs(uint64_t n, uint64_t f, F fill) {
    std::vector<float> v(n * f);
    for (uint64_t i = 0; i < n; ++i) {
      for (uint64_t j = 0; j < f; ++j) v[i * f + j] = fill(i, j);
    }
    write_npy(dir_.file("x.npy"), NpyDtype::Float32, {n, f}, v.data());
    return *this;
  }
  Workspace& inputs(uint64_t n, uint64_t f) {
    return inputs(n, f, [](uint64_t i, uint64_t j) { return 0.1f * static_cast<float>((i * 7 + j * 3) % 10); });
  }
  Workspace& float_targets(const std::vector<float>& v, std::vector<uint64_t> shape = {}) {
    if (shape.empty()) shape = {v.size(), 1};
    write_npy(dir_.file("y.npy"), NpyDtype::Float32, shape, v.data());
    has_targets_ = true;
    return *this;
  }
  Workspace& class_targets(const std::vector<int64_t>& v) {
    write_npy(dir_.file("y.npy"), NpyDtype::Int64, {v.size()}, v.data());
    has_targets_ = true;
    return *this;
  }
  Workspace& model(const std::string& source, std::vector<ParamSpec> params = {}, std::vector<std::pair<std::string, ModuleSpec>> children = {}) {
    save_module(dir_.file("m.pt"), ModuleSpec{"Net", source, std::move(params), std::move(children)});
    return *this;
  }
  Workspace& loader(const std::string& json) {
    loader_ = json;
    return *this;
  }
  Workspace& loss(const std::string& json) {
    loss_ = json;
    return *this;
  }
  Workspace& checks(const std::string& json) {
    checks_ = json;
    return *this;
  }

  std::string file(const std::string& name) const { return dir_.file(name); }

  ScanRun scan(std::vector<std::string> flags = {}) {
    write_config();
    std::vector<std::string> args = {"scan", dir_.file("cfg.json"), "-o", dir_.file("report.json"), "-q"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::ostringstream out, err;
    ScanRun r;
    r.code = run_cli(args, out, err);
    r.err = err.str();
    std::ifstream in(dir_.file("report.json"));
    if (in) r.report = Json::parse(in);
    test_util::expect_catalogued(r.report);
    return r;
  }

 private:
  TempDir dir_;
  bool has_targets_ = false;
  std::string loader_ = R"({"batch_size": 4})";
  std::string loss_ = R"({"type": "mse"})";
  std::string checks_ = R"({"probe_batch_sizes": []})";
};

}  // namespace batchcheck::test_util
