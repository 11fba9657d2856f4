// Which torch the engine would load, and the one line when it is not the one it was built for.
#include "supervise/torch_match.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace batchcheck;
namespace fs = std::filesystem;

namespace {

struct TorchTree {
  fs::path root;
  explicit TorchTree(const std::string& tag) : root(fs::temp_directory_path() / ("batchcheck_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(root);
    fs::create_directories(root / "torch" / "lib");
  }
  ~TorchTree() { fs::remove_all(root); }
  std::string lib() const { return (root / "torch" / "lib").string(); }
};

}  // namespace

TEST(TorchMatch, APipTorchSaysItsVersionInVersionPy) {
  TorchTree t("torch-pip");
  std::ofstream(t.root / "torch" / "version.py") << "from typing import Optional\n__version__ = '2.14.1+cu128'\ngit_version = 'x'\n";
  std::ofstream(t.root / "torch" / "lib" / "libtorch_cpu.so") << "x";
  EXPECT_EQ(torch_version_of(t.lib()), "2.14.1+cu128");
}

TEST(TorchMatch, ADistributionsTorchSaysItInTheLibrarysName) {
  TorchTree t("torch-deb");
  std::ofstream(t.root / "torch" / "lib" / "libtorch_cpu.so.1.13") << "x";
  fs::create_symlink("libtorch_cpu.so.1.13", t.root / "torch" / "lib" / "libtorch_cpu.so");
  EXPECT_EQ(torch_version_of(t.lib()), "1.13");  // its real name: libtorch_cpu.so.1.13.0 says 1.13.0
  fs::remove(t.root / "torch" / "lib" / "libtorch_cpu.so");
  std::ofstream(t.root / "torch" / "lib" / "libtorch_cpu.so") << "x";
  EXPECT_EQ(torch_version_of(t.lib()), "");  // neither says: the check stands aside
}

TEST(TorchMatch, FindsItWhereTheLoaderWouldThenInTheSystemsFolders) {
  TorchTree t("torch-find");
  std::ofstream(t.root / "torch" / "version.py") << "__version__ = '2.15.0'\n";
  std::ofstream(t.root / "torch" / "lib" / "libtorch_cpu.so") << "x";
  // An engine that does not exist has no search path: the system's folders only.
  EXPECT_FALSE(find_engine_torch("/nonexistent/engine.so", "", {}).has_value());
  const auto found = find_engine_torch("/nonexistent/engine.so", "", {"/nonexistent", t.lib()});
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->dir, t.lib());
  EXPECT_EQ(found->version, "2.15.0");
  // LD_LIBRARY_PATH is searched before them (with the engine's own RUNPATH: test_cuda_preload).
  const auto first = find_engine_torch(BATCHCHECK_ELF_RUNPATH_FIXTURE, t.lib(), {"/nonexistent"});
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->dir, t.lib());
}

TEST(TorchMatch, AnotherMinorIsOneLineNamingBothAndTheFix) {
  EXPECT_EQ(torch_mismatch(FoundTorch{"/x/torch/lib", "2.15.0+cu132"}, "2.15.0"), "");
  EXPECT_EQ(torch_mismatch(FoundTorch{"/x/torch/lib", "2.15.2"}, "2.15.0"), "");  // a patch release serves
  EXPECT_EQ(torch_mismatch(FoundTorch{"/x/torch/lib", ""}, "2.15.0"), "");        // unknown: no claim
  EXPECT_EQ(torch_mismatch(FoundTorch{"/x/torch/lib", "2.14.1"}, "2.15.0"),
            "this batchcheck was built for torch 2.15 and finds torch 2.14.1 in /x/torch/lib: pip install torch==2.15.*, "
            "or the batchcheck built for your torch: pip install --no-binary batchcheck batchcheck (builds it against your "
            "torch; needs a C++ compiler)");
  EXPECT_EQ(torch_mismatch(std::nullopt, "2.15.0"),
            "the scan engine needs LibTorch (libtorch_cpu.so of torch 2.15), and none is found where it looks (beside the "
            "batchcheck package, LD_LIBRARY_PATH, the system's folders): pip install torch==2.15.*, or the batchcheck built "
            "for your torch: pip install --no-binary batchcheck batchcheck (builds it against your torch; needs a C++ compiler)");
}
