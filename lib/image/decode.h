#pragma once
// Image files decoded as torchvision's ImageFolder loads them: PIL's
// Image.open(path).convert("RGB"). Torch-free; JPEG (libjpeg-turbo), PNG (libpng), WebP
// (libwebp, where the build found it) and binary PPM/PGM.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace batchcheck {

// 8-bit RGB, rows top to bottom, channels interleaved (PIL's layout).
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3
};

struct Decoded {
  Image image;
  std::string error;  // empty on success; else why, in PIL's words where PIL has them
  bool ok() const { return error.empty(); }
};

// Decodes by content (PIL ignores the extension too). Never throws for bad data: a file
// that cannot be decoded is an error text, as it is a finding for its sample.
Decoded decode_image(const uint8_t* data, std::size_t size);
Decoded decode_image_file(const std::string& path);

// Whether this build decodes WebP.
bool webp_supported();
// Whether this build has its image decoders at all (libjpeg and libpng were found).
bool image_decoders_built();

}  // namespace batchcheck
