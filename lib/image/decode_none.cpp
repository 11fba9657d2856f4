// A build without the image decoders (the pip package on a machine without libjpeg and libpng):
// the same interface, and image folders refused where they are opened (engine/data/image_source).
#include "image/decode.h"

namespace batchcheck {

bool image_decoders_built() { return false; }
bool webp_supported() { return false; }

Decoded decode_image(const uint8_t*, std::size_t) {
  Decoded d;
  d.error = "this batchcheck was built without its image decoders";
  return d;
}

Decoded decode_image_file(const std::string&) { return decode_image(nullptr, 0); }

}  // namespace batchcheck
