// Image folders against torchvision and the real PyTorch loop (tests/e2e/images/make_images.py):
// the listing is ImageFolder's, the tensors are its transform's, and a scan fails exactly at
// the batches where the loop raises (an undecodable file, images of unequal size).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli.h"
#include "core/config/config.h"
#include "core/parse/npy.h"
#include "image/decode.h"
#include "image/folder.h"
#include "image/transform.h"
#include "support/oracle_suite.h"
#include "support/test_helpers.h"

using namespace batchcheck;
using Json = nlohmann::json;

namespace {

class ImageFolders : public test_util::OracleSuite<ImageFolders> {
 public:
  static constexpr const char* kTag = "images";
  static constexpr const char* kScript = "tests/e2e/images/make_images.py";
  static constexpr const char* kWhat = "the image folder tests";
};

}  // namespace

TEST_F(ImageFolders, ListsTheSamplesAndClassesImageFolderDoes) {
  for (const std::string tree : {"tree-clean", "tree-corrupt"}) {
    SCOPED_TRACE(tree);
    const Json& t = truth(tree == "tree-clean" ? "crop" : "corrupt");
    ImageFolderIndex index = list_image_folder((dir_->path() / tree).string(), tree);
    EXPECT_EQ(Json(index.classes), t["classes"]);
    Json samples = Json::array();
    for (std::size_t i = 0; i < index.files.size(); ++i) samples.push_back({index.files[i], index.targets[i]});
    EXPECT_EQ(samples, t["samples"]);
  }
}

// The tolerance, stated: one 8-bit level per channel. PIL and batchcheck run the same integer
// resampling, so the levels agree exactly unless the JPEG libraries (PIL's bundled
// libjpeg-turbo, Debian's) decode differently. batchcheck orders the two passes as Pillow 13
// does; an older Pillow (Debian's, for the 1.13 build) goes horizontal first, so an image
// whose height shrinks more than twice as much as its width is compared only with Pillow 13.
TEST_F(ImageFolders, PixelsMatchPilsAfterResizeAndCenterCropWithinOneLevel) {
  for (const std::string name : {"crop", "bicubic", "pad-crop", "extra"}) {
    SCOPED_TRACE(name);
    const Config cfg = load_config(config_path(name));
    const Json& t = truth(name);
    NpyFile expected("pixels", dir_->file(name + "-pixels.npy"));
    ASSERT_EQ(expected.samples(), t["samples"].size());
    const auto& shape = expected.header().shape;  // N, H, W, 3
    ASSERT_EQ(shape.size(), 4u);
    std::vector<uint8_t> want(shape[1] * shape[2] * shape[3]);
    uint64_t exact = 0, skipped = 0;
    int worst = 0;
    for (uint64_t i = 0; i < expected.samples(); ++i) {
      const std::string file = t["samples"][i][0];
      const std::string tree = name == "extra" ? "tree-extra" : "tree-clean";
      Decoded d = decode_image_file((dir_->path() / tree / file).string());
      ASSERT_TRUE(d.ok()) << file << ": " << d.error;
      Image got = apply_transform(d.image, cfg.data.transform);
      const int dy = d.image.height - got.height, dx = d.image.width - got.width;
      if (!manifest_["pillow_vertical_first"].get<bool>() && cfg.data.transform.resize && dx != 0 && dy > 0 && dy > 2 * dx) {
        ++skipped;  // this Pillow runs the passes in the other order
        continue;
      }
      ASSERT_EQ(got.height, static_cast<int>(shape[1])) << file;
      ASSERT_EQ(got.width, static_cast<int>(shape[2])) << file;
      expected.read_rows({static_cast<int64_t>(i)}, want.data());
      int levels = 0;
      for (std::size_t k = 0; k < want.size(); ++k) levels = std::max(levels, std::abs(int{got.rgb[k]} - int{want[k]}));
      EXPECT_LE(levels, 1) << file;
      exact += levels == 0;
      worst = std::max(worst, levels);
    }
    std::cout << "[ info ] " << name << ": " << exact << " of " << expected.samples() - skipped
              << " images equal to PIL's pixel for pixel; largest difference " << worst << " level(s)";
    if (skipped) std::cout << "; " << skipped << " not compared (a Pillow older than 13)";
    std::cout << "\n";
  }
}

// ToTensor and Normalize: the model holds torchvision's float tensors and returns NaN unless
// the batch the scan feeds it (the whole folder) is within one level of them.
TEST_F(ImageFolders, FloatTensorsAreTorchvisions) {
  for (const std::string name : {"crop-floats", "pad-crop-floats"}) {
    SCOPED_TRACE(name);
    Scan s = scan(name);
    EXPECT_EQ(s.code, 0) << s.err << s.report["findings"].dump(1);
    EXPECT_EQ(s.report["batches"]["checked"], 1) << s.report["batches"].dump();
  }
  // The check can fail: a Normalize off by 2% is more than a level away, and the model says so.
  Json cfg;
  {
    std::ifstream in(config_path("crop-floats"));
    cfg = Json::parse(in);
  }
  cfg["data"]["transform"]["normalize"]["std"] = {0.2336, 0.2285, 0.2295};
  const std::filesystem::path off = dir_->path() / "crop-floats" / "config-off.json";
  std::ofstream(off) << cfg.dump();
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"scan", off.string(), "-q"}, out, err), 1) << err.str();
  EXPECT_NE(out.str().find("output-nonfinite"), std::string::npos) << out.str();
}

TEST_F(ImageFolders, CleanFolderPassesWithTheDefaultConfig) {
  for (const std::string name : {"crop", "bicubic", "pad-crop", "extra"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(truth(name)["failures"].empty());
    Scan s = scan(name);
    EXPECT_EQ(s.code, 0) << s.err << s.report["findings"].dump(1);
    EXPECT_EQ(s.report["dataset"]["samples"], truth(name)["samples"].size());
  }
}

TEST_F(ImageFolders, UndecodableFilesAreFindingsAtTheBatchesWhereTheLoopRaises) {
  const Json& t = truth("corrupt");
  const std::set<uint64_t> expected = loop_failures(t, "load");
  ASSERT_EQ(expected, (std::set<uint64_t>{0, 2}));
  Scan s = scan("corrupt");
  EXPECT_EQ(s.code, 1) << s.err;
  EXPECT_EQ(scan_failures(s.report, "sample-unreadable"), expected) << s.report["findings"].dump(1);
  ASSERT_EQ(s.report["findings"].size(), 1u) << s.report["findings"].dump(1);
  const Json& f = s.report["findings"][0];
  EXPECT_EQ(f["severity"], "error");
  EXPECT_EQ(f["stage"], "load");
  // The files, by the name the user wrote plus their place in the tree, and PIL's reason.
  const Json& first = f["occurrences"][0];
  EXPECT_EQ(first["files"][0]["file"], "../tree-corrupt/cat/b2-truncated.jpg") << first.dump(1);
  EXPECT_EQ(first["files"][0]["error"], "image file is truncated");
  const Json& second = f["occurrences"][1];
  EXPECT_EQ(second["files"][0]["file"], "../tree-corrupt/zebra/0-not-an-image.png") << second.dump(1);
  EXPECT_EQ(second["files"][0]["error"], "cannot identify image file");
  // The samples are the files' dataset indices.
  const Json& samples = t["samples"];
  for (const auto& o : f["occurrences"]) {
    for (const auto& i : o["samples"]) {
      const std::string file = samples[i.get<std::size_t>()][0];
      EXPECT_NE(o["files"][0]["file"].get<std::string>().find(file), std::string::npos) << file;
    }
  }
}

TEST_F(ImageFolders, ImagesOfUnequalSizeFailLikeDefaultCollate) {
  const Json& t = truth("ragged");
  const std::set<uint64_t> expected = loop_failures(t, "collate");
  ASSERT_EQ(expected, (std::set<uint64_t>{0, 1, 2}));
  Scan s = scan("ragged");
  EXPECT_EQ(s.code, 1) << s.err;
  EXPECT_EQ(scan_failures(s.report, "collate-error"), expected) << s.report["findings"].dump(1);
  EXPECT_EQ(s.report["summary"]["errors"], 1) << s.report["findings"].dump(1);
  // PyTorch's own message, word for word, shapes included: the resize matched torchvision's.
  for (const auto& f : s.report["findings"]) {
    if (f["id"] == "collate-error") {
      EXPECT_EQ(f["evidence"]["error"], t["failures"][0]["error"]);
    }
  }
}

// The case: one corrupt JPEG (and a file that is no image) and a class index the model
// has no output for, in a training pipeline with random crops and flips, exported with
// python/batchcheck_export.py from the user's own ImageFolder, model and DataLoader.
TEST_F(ImageFolders, ExportedTrainingPipelineFailsWhereTheLoopDoes) {
  const Json& t = truth("few-classes");
  ASSERT_EQ(loop_failures(t, "load"), (std::set<uint64_t>{0, 2}));
  ASSERT_EQ(loop_failures(t, "forward"), (std::set<uint64_t>{3}));  // "Target 2 is out of bounds."
  // The random crop is declared by its output size, the flip left out, and both said.
  ASSERT_EQ(t["export_warnings"].size(), 1u) << t.dump(1);
  EXPECT_NE(t["export_warnings"][0].get<std::string>().find("RandomResizedCrop (checked at its output size), RandomHorizontalFlip left out"),
            std::string::npos);
  std::ifstream in(config_path("few-classes"));
  const Json cfg = Json::parse(in);
  EXPECT_EQ(cfg["data"]["format"], "imagefolder");
  EXPECT_EQ(cfg["data"]["transform"]["center_crop"], 32);
  Scan s = scan("few-classes");
  EXPECT_EQ(s.code, 1) << s.err;
  EXPECT_EQ(scan_failures(s.report, "sample-unreadable"), loop_failures(t, "load")) << s.report["findings"].dump(1);
  EXPECT_EQ(scan_failures(s.report, "target-out-of-range"), loop_failures(t, "forward")) << s.report["findings"].dump(1);
  EXPECT_EQ(s.report["summary"]["errors"], 2) << s.report["findings"].dump(1);
}

// A user's own Dataset of images of different sizes: the export helper keeps per-sample
// tensors (they vary in more than their first dimension), and the scan fails where
// default_collate does.
TEST_F(ImageFolders, ExportedImagesOfDifferentSizesFailWhereDefaultCollateDoes) {
  const Json& t = truth("export-sizes");
  ASSERT_EQ(loop_failures(t, "collate"), (std::set<uint64_t>{0, 1, 2}));
  std::ifstream in(config_path("export-sizes"));
  EXPECT_EQ(Json::parse(in)["data"]["format"], "pt");
  Scan s = scan("export-sizes");
  EXPECT_EQ(s.code, 1) << s.err;
  EXPECT_EQ(scan_failures(s.report, "collate-error"), loop_failures(t, "collate")) << s.report["findings"].dump(1);
}
