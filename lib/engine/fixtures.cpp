#include "engine/fixtures.h"

#include <torch/script.h>
#include <torch/serialize.h>

#include <fstream>

#include <cmath>
#include <filesystem>

#include "core/parse/npy.h"

namespace batchcheck {

namespace {

torch::jit::Module build(const ModuleSpec& spec) {
  torch::jit::Module m(c10::QualifiedName("__torch__.batchcheck." + spec.type_name));
  // Every nn.Module has it; Module::train()/eval() set it, and forward code may read it.
  m.register_attribute("training", c10::BoolType::get(), true);
  for (const auto& p : spec.params) {
    int64_t n = 1;
    for (auto d : p.shape) n *= d;
    at::Tensor t = p.values.empty() ? at::zeros(p.shape) : at::tensor(p.values).reshape(p.shape).clone();
    if (static_cast<int64_t>(t.numel()) != n) throw std::runtime_error("ParamSpec " + p.name + ": size mismatch");
    // As nn.Parameter: gradients flow to it, so the scan's backward pass sees it.
    m.register_parameter(p.name, p.buffer ? t : t.set_requires_grad(true), p.buffer);
  }
  for (const auto& [name, child] : spec.children) m.register_module(name, build(child));
  m.define(spec.source);
  return m;
}

std::vector<float> random_values(Lcg& rng, std::size_t n, float scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = (rng.uniform() * 2.0f - 1.0f) * scale;
  return v;
}

void write_f32(const std::string& path, const std::vector<uint64_t>& shape, const std::vector<float>& v) {
  write_npy(path, NpyDtype::Float32, shape, v.data());
}

}  // namespace

float Lcg::normal() {
  // Box-Muller; deterministic given the stream.
  float u1 = std::max(uniform(), 1e-7f), u2 = uniform();
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
}

void save_module(const std::string& path, const ModuleSpec& spec) { build(spec).save(path); }

void save_pt(const std::string& path, const std::vector<PtEntry>& entries, bool as_tuple) {
  auto value = [](const PtEntry& e) -> c10::IValue {
    if (!e.is_tensor) return c10::IValue(int64_t{7});
    return at::zeros(e.shape);
  };
  c10::IValue root;
  if (as_tuple) {
    std::vector<c10::IValue> items;
    for (const auto& e : entries) items.push_back(value(e));
    root = c10::ivalue::Tuple::create(std::move(items));
  } else {
    c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
    for (const auto& e : entries) dict.insert(e.key, value(e));
    root = dict;
  }
  std::vector<char> bytes = torch::pickle_save(root);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void generate_samples(const std::string& dir) {
  std::filesystem::create_directories(dir);
  auto file = [&](const std::string& name) { return (std::filesystem::path(dir) / name).string(); };

  // 1. The seed's case: segmentation, 1041 images, batch 8. The model standardizes its
  //    features over the batch (unbiased std): a batch of one divides by NaN.
  {
    Lcg rng(1);
    const uint64_t n = 1041;
    std::vector<float> images(n * 3 * 64 * 64);
    for (auto& x : images) x = rng.uniform();
    std::vector<float> masks(n * 64 * 64);
    for (uint64_t i = 0; i < n; ++i) {
      // A disc per image, its centre and radius varying with i.
      const float cx = 16 + static_cast<float>(i % 32), cy = 16 + static_cast<float>((i / 32) % 32), r = 8 + static_cast<float>(i % 9);
      for (int y = 0; y < 64; ++y) {
        for (int x = 0; x < 64; ++x) {
          masks[i * 4096 + static_cast<uint64_t>(y) * 64 + static_cast<uint64_t>(x)] =
              (x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r ? 1.0f : 0.0f;
        }
      }
    }
    write_f32(file("seg_images.npy"), {n, 3, 64, 64}, images);
    write_f32(file("seg_masks.npy"), {n, 1, 64, 64}, masks);
    ModuleSpec unet{"TinySegNet",
                    R"(
def forward(self, x):
    y = torch.conv2d(x, self.conv_w, self.conv_b, [1, 1], [1, 1], [1, 1], 1)
    y = torch.relu(y)
    y = torch.conv2d(y, self.head_w, self.head_b, [1, 1], [0, 0], [1, 1], 1)
    # "batch standardization": std over the batch is NaN for a batch of one
    y = (y - y.mean(0, keepdim=True)) / (y.std(0, keepdim=True) + 1e-5)
    return torch.sigmoid(y)
)",
                    {{"conv_w", {8, 3, 3, 3}, random_values(rng, 8 * 27, 0.3f)},
                     {"conv_b", {8}, random_values(rng, 8, 0.1f)},
                     {"head_w", {1, 8, 1, 1}, random_values(rng, 8, 0.5f)},
                     {"head_b", {1}, {0.0f}}},
                    {}};
    save_module(file("seg_model.pt"), unet);
  }

  // 2. Classification with a stray label 255 (an "ignore" label from the annotation tool).
  {
    Lcg rng(2);
    const uint64_t n = 600, f = 16, c = 10;
    std::vector<float> x(n * f);
    for (auto& v : x) v = rng.normal();
    std::vector<int64_t> y(n);
    for (uint64_t i = 0; i < n; ++i) y[i] = static_cast<int64_t>(rng.next() % c);
    y[137] = 255;
    y[421] = 255;
    write_f32(file("cls_features.npy"), {n, f}, x);
    write_npy(file("cls_labels.npy"), NpyDtype::Int64, {n}, y.data());
    ModuleSpec mlp{"Mlp",
                   R"(
def forward(self, x):
    h = torch.relu(torch.matmul(x, self.w1) + self.b1)
    return torch.matmul(h, self.w2) + self.b2
)",
                   {{"w1", {16, 32}, random_values(rng, 16 * 32, 0.25f)},
                    {"b1", {32}, {}},
                    {"w2", {32, 10}, random_values(rng, 32 * 10, 0.18f)},
                    {"b2", {10}, {}}},
                   {}};
    save_module(file("cls_model.pt"), mlp);
  }

  // 3. A clean setup: 1024 samples, batch 32, logits with BCEWithLogitsLoss.
  {
    Lcg rng(3);
    const uint64_t n = 1024, f = 8;
    std::vector<float> x(n * f), y(n);
    for (auto& v : x) v = rng.normal();
    for (uint64_t i = 0; i < n; ++i) y[i] = x[i * f] + x[i * f + 1] > 0 ? 1.0f : 0.0f;
    write_f32(file("clean_features.npy"), {n, f}, x);
    write_f32(file("clean_labels.npy"), {n, 1}, y);
    ModuleSpec linear{"Linear",
                      R"(
def forward(self, x):
    return torch.matmul(x, self.w) + self.b
)",
                      {{"w", {8, 1}, random_values(rng, 8, 0.5f)}, {"b", {1}, {}}},
                      {}};
    save_module(file("clean_model.pt"), linear);
  }
}

}  // namespace batchcheck
