// Decoding as PIL does for ImageFolder's loader (Image.open(path).convert("RGB")): the same
// libraries PIL links (libjpeg-turbo, libpng, libwebp), asked for the same output, plus the
// few conversions PIL makes itself (CMYK, 16-bit grey).
//
// libjpeg and libpng report errors by longjmp: the functions that call setjmp hold only
// C structs in their own frame; their buffers and result belong to the caller's frame.
#include "image/decode.h"

#include <csetjmp>
#include <cstdio>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>
#include <iterator>

extern "C" {
#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#ifdef BATCHCHECK_HAVE_WEBP
#include <webp/decode.h>
#endif
}

namespace batchcheck {

namespace {

// PIL refuses images this large (Image.MAX_IMAGE_PIXELS, doubled: DecompressionBombError).
constexpr uint64_t kMaxPixels = 2ULL * 89478485ULL;

// Out of line, like every std::string operation of the functions that call setjmp: inlined
// there, a string's locals could be clobbered by the longjmp (GCC's -Wclobbered at -O1).
[[gnu::noinline]] void set_error(Decoded* out, const char* message) { out->error = message; }

[[gnu::noinline]] bool too_large(uint64_t w, uint64_t h, Decoded& out) {
  if (w <= kMaxPixels && h <= kMaxPixels && w * h <= kMaxPixels) return false;  // no 64-bit wrap
  if (w > kMaxPixels || h > kMaxPixels) {
    out.error = "Image size exceeds limit of " + std::to_string(kMaxPixels) + " pixels, could be decompression bomb DOS attack.";
    return true;
  }
  out.error = "Image size (" + std::to_string(w * h) + " pixels) exceeds limit of " + std::to_string(kMaxPixels) +
              " pixels, could be decompression bomb DOS attack.";
  return true;
}

// ---- JPEG

struct JpegErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  bool truncated;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void jpeg_fail(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings: PIL decodes through corrupt data, but a file that ends early is an error there
// ("image file is truncated"); libjpeg's memory source pads it with an EOI and warns.
extern "C" void jpeg_note(j_common_ptr c, int level) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) e->truncated = true;
}

// PIL's CMYK -> RGB (Convert.c cmyk2rgb), on the inverted ("CMYK;I") values PIL reads.
uint8_t cmyk_channel(int c, int nk) {
  const int t = c * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

[[gnu::noinline]] void components_error(Decoded* out, int components) {
  out->error = "cannot identify image file (a JPEG with " + std::to_string(components) + " components)";
}

void decode_jpeg(const uint8_t* data, std::size_t size, Decoded* out, std::vector<uint8_t>* row4) {
  jpeg_decompress_struct cinfo;
  JpegErrors err;
  std::memset(&err, 0, sizeof err);
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_fail;
  err.pub.emit_message = jpeg_note;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    set_error(out, err.message);
    return;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.num_components == 4;
  if (cinfo.num_components != 1 && cinfo.num_components != 3 && !cmyk) {
    jpeg_destroy_decompress(&cinfo);
    components_error(out, cinfo.num_components);
    return;
  }
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;  // grey: libjpeg replicates, as convert("RGB") does
  if (too_large(cinfo.image_width, cinfo.image_height, *out)) {
    jpeg_destroy_decompress(&cinfo);
    return;
  }
  jpeg_start_decompress(&cinfo);
  const uint64_t w = cinfo.output_width, h = cinfo.output_height;
  out->image.width = static_cast<int>(w);
  out->image.height = static_cast<int>(h);
  out->image.rgb.resize(w * h * 3);
  if (cmyk) row4->resize(w * 4);
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t* dst = out->image.rgb.data() + static_cast<uint64_t>(cinfo.output_scanline) * w * 3;
    JSAMPROW row = cmyk ? row4->data() : dst;
    jpeg_read_scanlines(&cinfo, &row, 1);
    if (cmyk) {
      for (uint64_t x = 0; x < w; ++x) {
        const uint8_t* p = row4->data() + 4 * x;
        const int nk = p[3];  // inverted K: 255 - (255 - k)
        for (int c = 0; c < 3; ++c) dst[3 * x + c] = cmyk_channel(255 - p[c], nk);
      }
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (err.truncated) set_error(out, "image file is truncated");
}

// ---- PNG

struct PngInput {
  const uint8_t* data;
  std::size_t size, pos;
  char message[256];
};

extern "C" void png_read_mem(png_structp png, png_bytep dst, png_size_t n) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (n > in->size - in->pos) png_error(png, "image file is truncated");
  std::memcpy(dst, in->data + in->pos, n);
  in->pos += n;
}

extern "C" void png_fail(png_structp png, png_const_charp msg) {
  auto* in = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(in->message, sizeof in->message, "%s", msg);
  png_longjmp(png, 1);
}

extern "C" void png_quiet(png_structp, png_const_charp) {}

void decode_png(const uint8_t* data, std::size_t size, Decoded* out, std::vector<uint8_t>* wide,
                std::vector<png_bytep>* rows) {
  PngInput in{data, size, 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &in, png_fail, png_quiet);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_read_struct(png ? &png : nullptr, nullptr, nullptr);
    set_error(out, "out of memory");
    return;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    set_error(out, in.message);
    return;
  }
  png_set_read_fn(png, &in, png_read_mem);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  // PIL's only limit is the pixel count
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  const int depth = png_get_bit_depth(png, info), type = png_get_color_type(png, info);
  if (too_large(w, h, *out)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return;
  }
  // PIL reads 16-bit grey as mode I;16, whose convert("RGB") clips at 255; every other
  // 16-bit mode keeps the high byte (png_set_strip_16).
  const bool grey16 = depth == 16 && type == PNG_COLOR_TYPE_GRAY;
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);  // tRNS ignored: convert drops alpha
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !grey16) png_set_strip_16(png);
  if (grey16) png_set_swap(png);  // host order, to clip
  if (type & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const std::size_t rowbytes = png_get_rowbytes(png, info);
  const int channels = png_get_channels(png, info);
  wide->resize(rowbytes * h);
  rows->resize(h);
  for (png_uint_32 y = 0; y < h; ++y) (*rows)[y] = wide->data() + y * rowbytes;
  png_read_image(png, rows->data());
  // No png_read_end: PIL stops after the image data, so a file missing its end chunk loads.
  out->image.width = static_cast<int>(w);
  out->image.height = static_cast<int>(h);
  out->image.rgb.resize(static_cast<std::size_t>(w) * h * 3);
  uint8_t* dst = out->image.rgb.data();
  for (png_uint_32 y = 0; y < h; ++y) {
    const uint8_t* src = (*rows)[y];
    for (png_uint_32 x = 0; x < w; ++x, dst += 3) {
      if (grey16) {
        uint16_t v;
        std::memcpy(&v, src + 2 * x, 2);
        dst[0] = dst[1] = dst[2] = static_cast<uint8_t>(v > 255 ? 255 : v);
      } else if (channels <= 2) {
        dst[0] = dst[1] = dst[2] = src[static_cast<std::size_t>(channels) * x];
      } else {
        // 4 channels: a palette's transparency became alpha; convert("RGB") drops it.
        std::memcpy(dst, src + static_cast<std::size_t>(channels) * x, 3);
      }
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
}

// ---- WebP

#ifdef BATCHCHECK_HAVE_WEBP
void decode_webp(const uint8_t* data, std::size_t size, Decoded* out) {
  WebPBitstreamFeatures f;
  if (WebPGetFeatures(data, size, &f) != VP8_STATUS_OK) {
    out->error = "cannot identify image file (not a WebP bitstream libwebp reads)";
    return;
  }
  if (too_large(static_cast<uint64_t>(f.width), static_cast<uint64_t>(f.height), *out)) return;
  int w = 0, h = 0;
  uint8_t* rgba = WebPDecodeRGBA(data, size, &w, &h);
  if (!rgba) {
    out->error = "image file is truncated or corrupt (libwebp cannot decode it)";
    return;
  }
  out->image.width = w;
  out->image.height = h;
  out->image.rgb.resize(static_cast<std::size_t>(w) * h * 3);
  // convert("RGB") drops the alpha channel: the colour under it is kept as decoded.
  for (std::size_t i = 0; i < static_cast<std::size_t>(w) * h; ++i) std::memcpy(out->image.rgb.data() + 3 * i, rgba + 4 * i, 3);
  WebPFree(rgba);
}
#endif

// ---- PPM / PGM (binary, 8-bit)

void decode_pnm(const uint8_t* data, std::size_t size, Decoded* out) {
  std::size_t pos = 2;
  auto number = [&](uint64_t& value) {
    for (;;) {
      while (pos < size && std::isspace(data[pos])) ++pos;
      if (pos < size && data[pos] == '#') {
        while (pos < size && data[pos] != '\n' && data[pos] != '\r') ++pos;
        continue;
      }
      break;
    }
    if (pos >= size || !std::isdigit(data[pos])) return false;
    value = 0;
    while (pos < size && std::isdigit(data[pos]) && value < (1ULL << 32)) value = value * 10 + (data[pos++] - '0');
    return true;
  };
  uint64_t w = 0, h = 0, maxval = 0;
  if (!number(w) || !number(h) || !number(maxval) || pos >= size || w == 0 || h == 0) {
    out->error = "cannot identify image file (a malformed PPM/PGM header)";
    return;
  }
  ++pos;  // the single whitespace before the pixels
  if (maxval != 255) {
    out->error = "cannot decode this PPM/PGM: batchcheck reads 8-bit files (maxval 255), this one has maxval " + std::to_string(maxval);
    return;
  }
  if (too_large(w, h, *out)) return;
  const bool grey = data[1] == '5';
  const uint64_t need = w * h * (grey ? 1 : 3);
  if (size - pos < need) {
    out->error = "image file is truncated";
    return;
  }
  out->image.width = static_cast<int>(w);
  out->image.height = static_cast<int>(h);
  out->image.rgb.resize(w * h * 3);
  if (!grey) {
    std::memcpy(out->image.rgb.data(), data + pos, need);
    return;
  }
  for (uint64_t i = 0; i < w * h; ++i) out->image.rgb[3 * i] = out->image.rgb[3 * i + 1] = out->image.rgb[3 * i + 2] = data[pos + i];
}

bool starts(const uint8_t* data, std::size_t size, const char* magic, std::size_t n, std::size_t at = 0) {
  return size >= at + n && std::memcmp(data + at, magic, n) == 0;
}

}  // namespace

bool image_decoders_built() { return true; }

bool webp_supported() {
#ifdef BATCHCHECK_HAVE_WEBP
  return true;
#else
  return false;
#endif
}

Decoded decode_image(const uint8_t* data, std::size_t size) try {
  Decoded out;
  std::vector<uint8_t> scratch;
  std::vector<png_bytep> rows;
  if (starts(data, size, "\xFF\xD8\xFF", 3)) {
    decode_jpeg(data, size, &out, &scratch);
  } else if (starts(data, size, "\x89PNG\r\n\x1A\n", 8)) {
    decode_png(data, size, &out, &scratch, &rows);
  } else if (starts(data, size, "RIFF", 4) && starts(data, size, "WEBP", 4, 8)) {
#ifdef BATCHCHECK_HAVE_WEBP
    decode_webp(data, size, &out);
#else
    out.error = "a WebP image, and this batchcheck was built without libwebp (install libwebp-dev and rebuild)";
#endif
  } else if (starts(data, size, "P5", 2) || starts(data, size, "P6", 2)) {
    decode_pnm(data, size, &out);
  } else if (starts(data, size, "BM", 2) || starts(data, size, "GIF8", 4) || starts(data, size, "II*\0", 4) ||
             starts(data, size, "MM\0*", 4)) {
    out.error = "an image format batchcheck does not decode (BMP, GIF or TIFF): it reads JPEG, PNG, WebP and PPM/PGM";
  } else {
    out.error = size == 0 ? "cannot identify image file (it is empty)" : "cannot identify image file";
  }
  if (!out.ok()) out.image = Image{};
  return out;
} catch (const std::bad_alloc&) {
  Decoded out;
  out.error = "not enough memory to decode it";
  return out;
}

Decoded decode_image_file(const std::string& path) {
  auto failed = [](std::string why) {
    Decoded out;
    out.error = std::move(why);
    return out;
  };
  // Without blocking: a FIFO named like an image would wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return failed(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    // A device (a link to /dev/zero) or a FIFO: PIL would read without end or block.
    return failed("not a regular file (a device, a FIFO or a socket)");
  }
  // An encoded image past 1 GiB is no photo: bounded before it is read into memory.
  constexpr uint64_t kMaxImageBytes = uint64_t{1} << 30;
  if (static_cast<uint64_t>(st.st_size) > kMaxImageBytes) {
    ::close(fd);
    return failed("the file is " + std::to_string(st.st_size) + " bytes, more than the 1 GiB batchcheck reads for one image");
  }
  std::vector<uint8_t> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return failed(std::string("cannot read: ") + std::strerror(e));
    }
    if (n == 0) break;  // shrank while read
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  bytes.resize(got);
  return decode_image(bytes.data(), bytes.size());
}

}  // namespace batchcheck
