// libFuzzer target: any bytes as an image file of an image folder must decode or give an error
// text (never a crash, a longjmp out of the decoder, or a buffer overrun), and a decoded image
// must have a consistent layout and go through Resize and CenterCrop.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "image/decode.h"
#include "image/transform.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  batchcheck::Decoded d = batchcheck::decode_image(data, size);
  if (!d.ok()) return 0;
  const batchcheck::Image& im = d.image;
  if (im.width <= 0 || im.height <= 0 || im.rgb.size() != static_cast<size_t>(im.width) * static_cast<size_t>(im.height) * 3) std::abort();
  if (static_cast<uint64_t>(im.width) * static_cast<uint64_t>(im.height) > 1u << 16) return 0;  // keep each run fast
  batchcheck::ImageTransform t;
  t.resize = batchcheck::ImageSize{7, 7, true};
  t.interpolation = size % 2 ? batchcheck::Interpolation::Bicubic : batchcheck::Interpolation::Bilinear;
  t.center_crop = batchcheck::ImageSize{5, 9, false};
  batchcheck::Image out = batchcheck::apply_transform(im, t);
  if (out.width != 9 || out.height != 5 || out.rgb.size() != 5 * 9 * 3) std::abort();
  return 0;
}
