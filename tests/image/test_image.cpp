// The image folder's torch-free parts: ImageFolder's listing and its errors, the decoders on
// bad bytes, CenterCrop's rounding and padding, Resize's sizes. The pixels themselves are
// compared with torchvision's in test_images.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/base/errors.h"
#include "image/decode.h"
#include "image/folder.h"
#include "image/transform.h"

using namespace batchcheck;
namespace fs = std::filesystem;

namespace {

class ImageFolderListing : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("bc_image_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void touch(const std::string& rel) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << "x";
  }
  std::string error_of() {
    try {
      list_image_folder(root_.string(), "train");
    } catch (const InputError& e) {
      return format_error(e);
    }
    return "(no error)";
  }
  fs::path root_;
};

}  // namespace

TEST_F(ImageFolderListing, SortsClassesAndWalksFoldersByPathAsTorchvisionDoes) {
  touch("b/2.jpg");
  touch("b/10.JPG");  // names sort as strings; the extension matches in any case
  touch("b/x/1.png");
  touch("b/x-y/1.png");
  touch("b/x/sub/1.png");  // folders sort as whole paths: "b/x" < "b/x-y" < "b/x/sub" ('-' < '/')
  touch("b/notes.txt");
  touch("a/z.webp");
  touch("a/.hidden/q.jpeg");
  touch("top.jpg");  // not in a class folder
  fs::create_directory_symlink(root_ / "a", root_ / "c");  // a linked class folder is a class
  ImageFolderIndex index = list_image_folder(root_.string(), "train");
  EXPECT_EQ(index.classes, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(index.files, (std::vector<std::string>{"a/z.webp", "a/.hidden/q.jpeg", "b/10.JPG", "b/2.jpg", "b/x/1.png", "b/x-y/1.png",
                                                   "b/x/sub/1.png", "c/z.webp", "c/.hidden/q.jpeg"}));
  EXPECT_EQ(index.targets, (std::vector<int64_t>{0, 0, 1, 1, 1, 1, 1, 2, 2}));
}

TEST_F(ImageFolderListing, ErrorsUseTorchvisionsWords) {
  EXPECT_EQ(error_of(), "batchcheck: error: train: Couldn't find any class folder in it: ImageFolder expects root/<class>/<image> (one sub-folder per class)");
  touch("cat/a.jpg");
  touch("dog/readme.md");
  touch("emu/x.gif");
  EXPECT_EQ(error_of(), "batchcheck: error: train: Found no valid file for the classes dog, emu. Supported extensions are: .jpg, .jpeg, "
                        ".png, .ppm, .bmp, .pgm, .tif, .tiff, .webp");
  fs::remove_all(root_ / "dog");
  fs::remove_all(root_ / "emu");
  fs::create_directory_symlink(root_ / "cat", root_ / "cat" / "loop");
  EXPECT_EQ(error_of(), "batchcheck: error: train: the symbolic link cat/loop leads back to a folder above it: ImageFolder would list "
                        "the same files over and over; remove the link");
  fs::remove(root_ / "cat" / "loop");
  EXPECT_EQ(error_of(), "(no error)");
  try {
    list_image_folder((root_ / "cat" / "a.jpg").string(), "train/cat/a.jpg");
    ADD_FAILURE() << "a file as the root";
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), "batchcheck: error: train/cat/a.jpg: is not a folder: format \"imagefolder\" reads "
                               "root/<class>/<image> (set \"path\" to the root folder)");
  }
  try {
    list_image_folder((root_ / "missing").string(), "missing");
    ADD_FAILURE() << "a missing root";
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), "batchcheck: error: missing: cannot open the image folder: No such file or directory");
  }
}

TEST(ImageDecode, BadBytesAreErrorTextsNotCrashes) {
  auto decode = [](const std::string& bytes) { return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()); };
  EXPECT_EQ(decode("").error, "cannot identify image file (it is empty)");
  EXPECT_EQ(decode("<html>404</html>").error, "cannot identify image file");
  EXPECT_EQ(decode("BM\x10\x00").error, "an image format batchcheck does not decode (BMP, GIF or TIFF): it reads JPEG, PNG, WebP and PPM/PGM");
  // A JPEG or PNG signature followed by garbage: the library's own message, no longjmp escapes.
  EXPECT_FALSE(decode(std::string("\xFF\xD8\xFF\xE0garbage", 11)).ok());
  EXPECT_FALSE(decode(std::string("\x89PNG\r\n\x1A\n\0\0\0\x0DIHDR", 16)).ok());
  // Binary PPM/PGM: pixels as stored, grey replicated; short data is a truncated file.
  Decoded ppm = decode(std::string("P6\n# comment\n2 1\n255\n\x01\x02\x03\x04\x05\x06", 27));
  ASSERT_TRUE(ppm.ok()) << ppm.error;
  EXPECT_EQ(ppm.image.width, 2);
  EXPECT_EQ(ppm.image.rgb, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  Decoded pgm = decode(std::string("P5 2 1 255\n\x07\x09", 13));
  ASSERT_TRUE(pgm.ok()) << pgm.error;
  EXPECT_EQ(pgm.image.rgb, (std::vector<uint8_t>{7, 7, 7, 9, 9, 9}));
  EXPECT_EQ(decode(std::string("P6 2 1 255\n\x01\x02", 13)).error, "image file is truncated");
  EXPECT_EQ(decode("P6 2 1 65535\n").error, "cannot decode this PPM/PGM: batchcheck reads 8-bit files (maxval 255), this one has maxval 65535");
  // Sides whose product wraps 64 bits are refused, not read as a 0x0 image.
  EXPECT_EQ(decode("P6 4294967296 4294967296 255\n").error,
            "Image size exceeds limit of 178956970 pixels, could be decompression bomb DOS attack.");
  EXPECT_EQ(decode("P6 40000 40000 255\n").error,
            "Image size (1600000000 pixels) exceeds limit of 178956970 pixels, could be decompression bomb DOS attack.");
}

TEST(ImageTransform, ResizeKeepsTheAspectAsTorchvisionComputesIt) {
  ImageSize edge{36, 36, true};
  EXPECT_EQ(resized_size(30, 40, edge), (std::pair<int, int>{36, 48}));
  EXPECT_EQ(resized_size(57, 33, edge), (std::pair<int, int>{62, 36}));  // int(36 * 57 / 33) = int(62.18)
  EXPECT_EQ(resized_size(30, 40, ImageSize{24, 40, false}), (std::pair<int, int>{24, 40}));
}

TEST(ImageTransform, CenterCropRoundsHalvesToEvenAndPadsWithZeros) {
  Image in;
  in.width = 5;
  in.height = 1;
  for (uint8_t v = 1; v <= 5; ++v) in.rgb.insert(in.rgb.end(), {v, v, v});
  // (5 - 2) / 2 = 1.5 rounds to 2 (Python's round), so the crop starts at column 2.
  Image c = center_crop(in, 1, 2);
  EXPECT_EQ(c.rgb, (std::vector<uint8_t>{3, 3, 3, 4, 4, 4}));
  // Wider than the image: padded (left (8-5)//2 = 1, right 2) with zeros.
  Image p = center_crop(in, 1, 8);
  EXPECT_EQ(p.rgb, (std::vector<uint8_t>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 0, 0, 0, 0, 0, 0}));
}

TEST(ImageTransform, ResamplingAConstantImageKeepsItAndSameSizeIsACopy) {
  Image in;
  in.width = 17;
  in.height = 9;
  in.rgb.assign(17 * 9 * 3, 200);
  for (auto filter : {Interpolation::Bilinear, Interpolation::Bicubic}) {
    Image down = resample(in, 5, 4, filter);
    EXPECT_EQ(down.rgb, std::vector<uint8_t>(5 * 4 * 3, 200));
    Image up = resample(in, 40, 30, filter);
    EXPECT_EQ(up.rgb, std::vector<uint8_t>(40 * 30 * 3, 200));
  }
  EXPECT_EQ(resample(in, 17, 9, Interpolation::Bilinear).rgb, in.rgb);
}
