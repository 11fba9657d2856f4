#pragma once
// torchvision's deterministic PIL transforms, bit for bit where PIL computes in integers:
// Resize (PIL's two-pass resampling with antialiasing, bilinear or bicubic, 22-bit fixed
// point), CenterCrop (zero padding when the crop is larger, Python's round). ToTensor and
// Normalize are float ops, done by the engine with LibTorch's own kernels.
#include <optional>
#include <utility>

#include "core/config/config.h"
#include "image/decode.h"

namespace batchcheck {

// transforms.Resize(size): an int matches the smaller edge (the other as
// int(size * long / short)), [h, w] is exact. Returns {height, width}; throws
// std::length_error for a side past 2^24 (an extreme aspect ratio).
std::pair<int, int> resized_size(int height, int width, const ImageSize& size);

// PIL's Image.resize((width, height), filter).
Image resample(const Image& in, int width, int height, Interpolation filter);

// transforms.CenterCrop([h, w]).
Image center_crop(const Image& in, int height, int width);

// Resize then CenterCrop, as the config declares them (either may be absent).
Image apply_transform(const Image& in, const ImageTransform& t);

// The output's {height, width} when every image gets the same (a crop, or an exact resize).
std::optional<std::pair<int, int>> fixed_output_size(const ImageTransform& t);

}  // namespace batchcheck
