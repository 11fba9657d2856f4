// PIL's resampling (libImaging/Resample.c) reimplemented from its algorithm: per output pixel
// a window of the filter scaled by the reduction (antialiasing), weights normalized and
// rounded to 22-bit fixed point, one pass per axis with an 8-bit image in between.
#include "image/transform.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace batchcheck {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bilinear(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

struct Coefficients {
  int ksize = 0;
  std::vector<int> first, count;  // per output pixel: the input window
  std::vector<int32_t> k;         // ksize per output pixel, fixed point
};

Coefficients coefficients(int in_size, int out_size, Interpolation filter) {
  const double support_1 = filter == Interpolation::Bicubic ? 2.0 : 1.0;
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = support_1 * filterscale;
  Coefficients c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<std::size_t>(out_size));
  c.count.resize(static_cast<std::size_t>(out_size));
  c.k.assign(static_cast<std::size_t>(out_size) * static_cast<std::size_t>(c.ksize), 0);
  std::vector<double> w(static_cast<std::size_t>(c.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double v = (x + xmin - center + 0.5) * ss;
      w[static_cast<std::size_t>(x)] = filter == Interpolation::Bicubic ? bicubic(v) : bilinear(v);
      ww += w[static_cast<std::size_t>(x)];
    }
    int32_t* k = &c.k[static_cast<std::size_t>(xx) * static_cast<std::size_t>(c.ksize)];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[static_cast<std::size_t>(x)] / ww : w[static_cast<std::size_t>(x)];
      k[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    c.first[static_cast<std::size_t>(xx)] = xmin;
    c.count[static_cast<std::size_t>(xx)] = xmax;
  }
  return c;
}

uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;  // arithmetic shift, as PIL's lookup table indexes
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Resamples along x (stride 3 between pixels of a row) for rows [y0, y0 + rows).
Image horizontal(const Image& in, int width, int y0, int rows, Interpolation filter) {
  const Coefficients c = coefficients(in.width, width, filter);
  Image out;
  out.width = width;
  out.height = rows;
  out.rgb.resize(static_cast<std::size_t>(width) * static_cast<std::size_t>(rows) * 3);
  for (int y = 0; y < rows; ++y) {
    const uint8_t* src = &in.rgb[static_cast<std::size_t>(y0 + y) * static_cast<std::size_t>(in.width) * 3];
    uint8_t* dst = &out.rgb[static_cast<std::size_t>(y) * static_cast<std::size_t>(width) * 3];
    for (int xx = 0; xx < width; ++xx) {
      const int32_t* k = &c.k[static_cast<std::size_t>(xx) * static_cast<std::size_t>(c.ksize)];
      const uint8_t* p = src + static_cast<std::size_t>(c.first[static_cast<std::size_t>(xx)]) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < c.count[static_cast<std::size_t>(xx)]; ++x, p += 3) {
        s0 += p[0] * k[x];
        s1 += p[1] * k[x];
        s2 += p[2] * k[x];
      }
      dst[3 * xx] = clip8(s0);
      dst[3 * xx + 1] = clip8(s1);
      dst[3 * xx + 2] = clip8(s2);
    }
  }
  return out;
}

Image vertical(const Image& in, const Coefficients& c, int offset, int height) {
  Image out;
  out.width = in.width;
  out.height = height;
  const std::size_t stride = static_cast<std::size_t>(in.width) * 3;
  out.rgb.resize(stride * static_cast<std::size_t>(height));
  for (int yy = 0; yy < height; ++yy) {
    const int32_t* k = &c.k[static_cast<std::size_t>(yy) * static_cast<std::size_t>(c.ksize)];
    const int first = c.first[static_cast<std::size_t>(yy)] - offset;
    for (std::size_t i = 0; i < stride; ++i) {
      int32_t s = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < c.count[static_cast<std::size_t>(yy)]; ++y) {
        s += in.rgb[static_cast<std::size_t>(first + y) * stride + i] * k[y];
      }
      out.rgb[static_cast<std::size_t>(yy) * stride + i] = clip8(s);
    }
  }
  return out;
}

}  // namespace

std::pair<int, int> resized_size(int height, int width, const ImageSize& size) {
  if (!size.smaller_edge) return {size.height, size.width};
  const bool portrait = width <= height;
  const int64_t shorter = portrait ? width : height, longer = portrait ? height : width;
  // Python: int(requested_new_short * long / short), a float division truncated.
  const double exact = static_cast<double>(int64_t{size.height} * longer) / static_cast<double>(shorter);
  if (!(exact < (1 << 24))) throw std::length_error("resizing it gives a side of " + std::to_string(static_cast<int64_t>(exact)) + " pixels");
  const int other = static_cast<int>(exact);
  return portrait ? std::pair<int, int>{other, size.height} : std::pair<int, int>{size.height, other};
}

Image resample(const Image& in, int width, int height, Interpolation filter) {
  if (width == in.width && height == in.height) return in;
  const Coefficients vert = coefficients(in.height, height, filter);
  if (width == in.width) return vertical(in, vert, 0, height);
  if (height == in.height) return horizontal(in, width, 0, in.height, filter);
  // Pillow 13 runs the vertical pass first when it shrinks the height by more than twice
  // what the horizontal one takes off the width (and horizontal first otherwise, as every
  // Pillow before it did); the 8-bit image between the passes makes the order show.
  const int dy = in.height - height, dx = in.width - width;
  if (dy > 0 && dy > 2 * dx) return horizontal(vertical(in, vert, 0, height), width, 0, height, filter);
  // Only the rows the vertical pass reads go through the horizontal one.
  const int first = vert.first.front();
  const int last = vert.first.back() + vert.count.back();
  return vertical(horizontal(in, width, first, last - first, filter), vert, first, height);
}

Image center_crop(const Image& in, int height, int width) {
  // Larger than the image: torchvision pads with zeros first ((d // 2, (d + 1) // 2) per axis).
  const int pad_left = width > in.width ? (width - in.width) / 2 : 0;
  const int pad_top = height > in.height ? (height - in.height) / 2 : 0;
  const int pw = in.width + (width > in.width ? width - in.width : 0);
  const int ph = in.height + (height > in.height ? height - in.height : 0);
  // Python's round(): halves to even, as nearbyint does in the default rounding mode.
  const int top = static_cast<int>(std::nearbyint((ph - height) / 2.0));
  const int left = static_cast<int>(std::nearbyint((pw - width) / 2.0));
  Image out;
  out.width = width;
  out.height = height;
  out.rgb.assign(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3, 0);
  for (int y = 0; y < height; ++y) {
    const int sy = y + top - pad_top;
    if (sy < 0 || sy >= in.height) continue;
    for (int x = 0; x < width; ++x) {
      const int sx = x + left - pad_left;
      if (sx < 0 || sx >= in.width) continue;
      const std::size_t s = (static_cast<std::size_t>(sy) * static_cast<std::size_t>(in.width) + static_cast<std::size_t>(sx)) * 3;
      const std::size_t d = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x)) * 3;
      out.rgb[d] = in.rgb[s];
      out.rgb[d + 1] = in.rgb[s + 1];
      out.rgb[d + 2] = in.rgb[s + 2];
    }
  }
  return out;
}

Image apply_transform(const Image& in, const ImageTransform& t) {
  Image out = in;
  if (t.resize) {
    const auto [h, w] = resized_size(in.height, in.width, *t.resize);
    out = resample(out, w, h, t.interpolation);
  }
  if (t.center_crop) out = center_crop(out, t.center_crop->height, t.center_crop->width);
  return out;
}

std::optional<std::pair<int, int>> fixed_output_size(const ImageTransform& t) {
  if (t.center_crop) return std::pair<int, int>{t.center_crop->height, t.center_crop->width};
  if (t.resize && !t.resize->smaller_edge) return std::pair<int, int>{t.resize->height, t.resize->width};
  return std::nullopt;
}

}  // namespace batchcheck
