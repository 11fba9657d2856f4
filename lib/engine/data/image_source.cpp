// An image folder as torchvision's ImageFolder delivers it: (image, class index) per sample,
// the image decoded as PIL does and put through the declared transform, then ToTensor
// (uint8 -> float / 255) and Normalize with LibTorch's own ops, so the floats are PyTorch's.
#include <ATen/Parallel.h>

#include "core/base/errors.h"
#include "engine/data/data_fields.h"
#include "engine/data/data_source.h"
#include "image/decode.h"
#include "image/folder.h"
#include "image/transform.h"

namespace batchcheck {

namespace {

class ImageFolderSource : public DataSource {
 public:
  explicit ImageFolderSource(const Config& cfg)
      : root_(cfg.data.path), display_(cfg.data.path_display), transform_(cfg.data.transform), collate_(cfg.loader.collate) {
    index_ = list_image_folder(root_, display_);
    names_ = cfg.model.inputs_kind == InputsKind::Single ? std::vector<std::string>{"inputs"}
                                                         : wanted_fields(cfg, {"inputs"}, "targets", display_);
    check_pad_keys(cfg, names_, "targets");
    if (!transform_.mean.empty()) {
      mean_ = at::tensor(transform_.mean, at::kFloat).view({-1, 1, 1});
      std_ = at::tensor(transform_.std, at::kFloat).view({-1, 1, 1});
    }
  }
  uint64_t samples() const override { return index_.files.size(); }
  const std::vector<std::string>& input_names() const override { return names_; }
  bool has_targets() const override { return true; }
  TensorMeta sample_meta(int field) const override {
    TensorMeta m;
    m.present = true;
    if (field == kTargetField) {
      m.dtype = "int64";  // default_collate of Python ints
      return m;
    }
    const auto size = fixed_output_size(transform_);
    m.shape = {3, size ? size->first : -1, size ? size->second : -1};
    m.dtype = "float32";
    m.floating = true;
    return m;
  }
  uint64_t sample_bytes() const override {
    // Decoding dominates: always worth reading ahead (a 224x224 crop is 600 KB of floats).
    const auto size = fixed_output_size(transform_);
    return 3ULL * 4ULL * static_cast<uint64_t>(size ? size->first * size->second : 224 * 224);
  }
  at::Tensor gather(int field, const std::vector<int64_t>& indices) const override {
    if (field == kTargetField) {
      std::vector<int64_t> t;
      t.reserve(indices.size());
      for (int64_t i : indices) t.push_back(index_.targets.at(static_cast<std::size_t>(i)));
      return at::tensor(t, at::kLong);
    }
    // Decoded in parallel, as DataLoader workers would; errors kept per sample, never thrown
    // across threads.
    std::vector<Image> images(indices.size());
    std::vector<std::string> errors(indices.size());
    at::parallel_for(0, static_cast<int64_t>(indices.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const auto i = static_cast<std::size_t>(indices[static_cast<std::size_t>(r)]);
        Decoded d = decode_image_file(root_ + "/" + index_.files.at(i));
        if (!d.ok()) {
          errors[static_cast<std::size_t>(r)] = d.error;
          continue;
        }
        try {
          images[static_cast<std::size_t>(r)] = apply_transform(d.image, transform_);
        } catch (const std::exception& e) {  // a side past 2^24, or no memory for it
          errors[static_cast<std::size_t>(r)] = std::string("cannot transform it: ") + e.what();
        }
      }
    });
    std::vector<UnreadableSample> bad;
    for (std::size_t r = 0; r < indices.size(); ++r) {
      if (!errors[r].empty()) bad.push_back({r, display_ + "/" + index_.files[static_cast<std::size_t>(indices[r])], errors[r]});
    }
    if (!bad.empty()) throw UnreadableError{std::move(bad)};
    std::vector<at::Tensor> samples;
    samples.reserve(images.size());
    for (auto& img : images) samples.push_back(to_tensor(img));
    const std::string& name = names_.front();
    return collate_samples(samples, name, collate_.pad_for(name, false), collate_.pad_to_multiple_of);
  }

 private:
  // ToTensor then Normalize, with torchvision's ops: permute to CHW, to(float).div(255),
  // sub_(mean).div_(std).
  at::Tensor to_tensor(Image& img) const {
    at::Tensor hwc = at::from_blob(img.rgb.data(), {img.height, img.width, 3}, at::kByte);
    at::Tensor t = hwc.permute({2, 0, 1}).contiguous().to(at::kFloat).div(255);
    if (mean_.defined()) t.sub_(mean_).div_(std_);
    return t;
  }

  std::string root_, display_;
  ImageTransform transform_;
  CollateConfig collate_;
  ImageFolderIndex index_;
  std::vector<std::string> names_;
  at::Tensor mean_, std_;
};

}  // namespace

std::unique_ptr<DataSource> open_image_source(const Config& cfg) {
  if (!image_decoders_built()) {
    throw InputError(cfg.file, "data.format",
                     "this batchcheck was built without its image reader (libjpeg and libpng were not found when it was "
                     "built): install libjpeg-dev, libpng-dev and libwebp-dev and reinstall it (pip install --no-binary "
                     "batchcheck batchcheck), or scan from Python, where your own Dataset decodes the images: "
                     "batchcheck.scan(model, loader, loss)");
  }
  return std::make_unique<ImageFolderSource>(cfg);
}

}  // namespace batchcheck
