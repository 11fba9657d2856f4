// torch.export programs compiled by AOTInductor (torch._inductor.aoti_compile_and_package):
// forward only, as exported. No autograd, no train mode, no BatchNorm state to inspect.
#include <torch/version.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "core/base/errors.h"
#include "core/base/text.h"
#include "engine/compat.h"
#include "engine/cuda_runtime.h"
#include "engine/model/model_runner.h"
#include "engine/torch_util.h"

#if BATCHCHECK_HAS_AOTI
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#endif

namespace batchcheck {

namespace {

#if BATCHCHECK_HAS_AOTI

// A zip's central directory (at its end) names every entry: enough to tell an AOTInductor
// package from an uncompiled ExportedProgram or a TorchScript archive without unpacking.
struct Pt2Contents {
  bool zip = false, aoti = false, exported_program = false, torchscript = false;
};

Pt2Contents inspect(const std::string& path) {
  constexpr std::streamoff kTail = 8 << 20;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  Pt2Contents c;
  const std::streamoff size = in.tellg();
  if (size < 4) return c;
  in.seekg(0);
  char magic[4] = {};
  in.read(magic, 4);
  c.zip = std::equal(magic, magic + 4, "PK\x03\x04");
  const std::streamoff from = std::max<std::streamoff>(0, size - kTail);
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  in.seekg(from);
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  c.aoti = tail.find("/data/aotinductor/") != std::string::npos;
  c.exported_program = tail.find("/models/") != std::string::npos || tail.find("serialized_exported_program") != std::string::npos;
  c.torchscript = tail.find("/code/") != std::string::npos && tail.find("/data.pkl") != std::string::npos;
  return c;
}

void refuse_unless_aoti(const std::string& path) {
  const Pt2Contents c = inspect(path);
  if (c.aoti) return;
  if (!c.zip) throw InputError(path, "", "not a .pt2 package (a zip archive written by torch._inductor.aoti_compile_and_package)");
  if (c.torchscript) {
    throw InputError(path, "", "a TorchScript archive, not a torch.export package: set \"format\": \"torchscript\" in \"model\"");
  }
  if (c.exported_program) {
    throw InputError(path, "",
                     "an ExportedProgram (torch.export.save) that is not compiled: LibTorch has no runtime for it; compile it "
                     "with AOTInductor and scan that package: torch._inductor.aoti_compile_and_package("
                     "torch.export.load(\"" + path + "\"), package_path=\"model_aoti.pt2\")");
  }
  throw InputError(path, "", "a zip archive with no AOTInductor model in it (expected data/aotinductor/ entries written by "
                             "torch._inductor.aoti_compile_and_package)");
}

// A compiled program also prints each failed input check to stderr ("Error: ..."); the
// exception carries the same text, which the finding reports. Silenced for the run only.
class QuietStderr {
 public:
  QuietStderr() {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved_ >= 0 && null >= 0) ::dup2(null, 2);
    if (null >= 0) ::close(null);
  }
  ~QuietStderr() {
    std::fflush(stderr);
    if (saved_ >= 0) {
      ::dup2(saved_, 2);
      ::close(saved_);
    }
  }
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  int saved_ = -1;
};

class AotiRunner : public ModelRunner {
 public:
  AotiRunner(const ModelConfig& model, const c10::Device& device) {
    const std::string& path = model.path;
    require_model_file(path, "a .pt2 package (torch._inductor.aoti_compile_and_package)");
    refuse_unless_aoti(path);
    // The program checks its inputs against torch.export's shape guards only when this is set
    // (read once, at the first run); the scan exists to see those failures.
    ::setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", 1);
    std::unordered_map<std::string, std::string> meta;
    try {
      meta = torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model");
    } catch (const std::exception& e) {
      throw InputError(path, "", "cannot read the AOTInductor package's metadata: " + single_line(exception_message(e)).substr(0, 240));
    }
    const std::string compiled_for = meta.count("AOTI_DEVICE_KEY") ? meta["AOTI_DEVICE_KEY"] : "cpu";
    if ((compiled_for == "cuda") != device.is_cuda()) {
      throw InputError(path, "", "the package was compiled for " + compiled_for + " but the scan runs on " + device.str() +
                                     ": use --device " + compiled_for + ", or compile the program for " + device.str());
    }
    try {
      loader_ = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
          path, "model", false, 1, device.is_cuda() ? device.index() : static_cast<c10::DeviceIndex>(-1));
    } catch (const std::exception& e) {
      throw InputError(path, "", "cannot load the AOTInductor package: " + single_line(exception_message(e)).substr(0, 240) +
                                     libtorch_rest_note());
    }
    info_.format = "pt2";
  }

  c10::IValue forward(const std::vector<c10::IValue>& values) override {
    std::vector<at::Tensor> inputs, out;
    for (const auto& v : values) inputs.push_back(v.toTensor());  // config.cpp refuses lists for .pt2
    {
      QuietStderr quiet;
      out = loader_->run(inputs);
    }
    if (out.size() == 1) return out.front();
    // A program returns its outputs flattened: a tuple, selected by index ("output": N).
    std::vector<c10::IValue> items(out.begin(), out.end());
    return c10::ivalue::Tuple::create(std::move(items));
  }
  const ModelInfo& info() const override { return info_; }
  const std::vector<std::pair<std::string, at::Tensor>>& parameters() const override { return no_params_; }
  void reset() override {}
  std::vector<std::string> nonfinite_batchnorm_stats() override { return {}; }

 private:
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  ModelInfo info_;
  std::vector<std::pair<std::string, at::Tensor>> no_params_;
};

#endif

}  // namespace

std::unique_ptr<ModelRunner> load_pt2(const ModelConfig& model, const c10::Device& device) {
#if BATCHCHECK_HAS_AOTI
  load_cuda_runtime();  // the package's library is built against the whole LibTorch (libtorch.so)
  return std::make_unique<AotiRunner>(model, device);
#else
  (void)device;
  require_model_file(model.path, "a .pt2 package (torch._inductor.aoti_compile_and_package)");
  throw InputError(model.path, "",
                   "a .pt2 program needs LibTorch 2.6 or newer, and this batchcheck links LibTorch " TORCH_VERSION
                   ": build it against the torch you train with (the default build; see the README)");
#endif
}

}  // namespace batchcheck
