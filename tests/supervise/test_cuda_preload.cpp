// The engine child's preload: where the loader finds the engine's LibTorch (RPATH,
// LD_LIBRARY_PATH, RUNPATH, $ORIGIN), and what environment a CUDA scan's child is given.
#include "supervise/cuda_preload.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>


using namespace batchcheck;
namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  explicit TempDir(const std::string& tag) : path_(fs::temp_directory_path() / ("batchcheck_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// The fixtures, built with RUNPATH "$ORIGIN/torchlib:/nonexistent/runpath" (new dtags) or the
// same as RPATH (old dtags): copied into a folder, they find "torchlib" beside them.
struct Installed {
  TempDir dir;
  std::string object;
  Installed(const char* fixture, const std::string& tag) : dir(tag) {
    object = dir.file("libengine.so");
    fs::copy_file(fixture, object);
    fs::create_directories(dir.path() / "torchlib");
  }
  void touch(const std::string& name) const { std::ofstream(dir.path() / "torchlib" / name) << "x"; }
  std::string torchlib() const { return (dir.path() / "torchlib").string(); }
};

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST(CudaPreload, RunpathComesAfterLdLibraryPathWithOriginExpanded) {
  Installed lib(BATCHCHECK_ELF_RUNPATH_FIXTURE, "elf-runpath");
  const std::string origin = lib.dir.path().string();
  EXPECT_EQ(loader_search_dirs(lib.object, ""), (std::vector<std::string>{origin + "/torchlib", "/nonexistent/runpath"}));
  EXPECT_EQ(loader_search_dirs(lib.object, "/a:/b;/c"),
            (std::vector<std::string>{"/a", "/b", "/c", origin + "/torchlib", "/nonexistent/runpath"}));
}

TEST(CudaPreload, RpathComesBeforeLdLibraryPath) {
  Installed lib(BATCHCHECK_ELF_RPATH_FIXTURE, "elf-rpath");
  const std::string origin = lib.dir.path().string();
  EXPECT_EQ(loader_search_dirs(lib.object, "/a"), (std::vector<std::string>{origin + "/torchlib", "/nonexistent/runpath", "/a"}));
}

TEST(CudaPreload, NotAnElfObjectHasNoSearchPath) {
  TempDir dir("elf-none");
  std::ofstream(dir.file("libx.so")) << "#!/bin/sh\n";
  EXPECT_TRUE(loader_search_dirs(dir.file("libx.so"), "/a").empty());
  EXPECT_TRUE(loader_search_dirs(dir.file("missing.so"), "/a").empty());
  EXPECT_TRUE(engine_environment("cuda", dir.file("libx.so")).empty());
}

TEST(CudaPreload, FindsTheLibraryWhereTheLoaderWould) {
  Installed lib(BATCHCHECK_ELF_RUNPATH_FIXTURE, "elf-find");
  EXPECT_EQ(find_dependency(lib.object, "libtorch_cpu.so", ""), std::nullopt);
  lib.touch("libtorch_cpu.so");
  EXPECT_EQ(find_dependency(lib.object, "libtorch_cpu.so", ""), lib.torchlib());
  // LD_LIBRARY_PATH wins over RUNPATH, as it does for the loader.
  TempDir other("elf-llp");
  std::ofstream(other.file("libtorch_cpu.so")) << "x";
  EXPECT_EQ(find_dependency(lib.object, "libtorch_cpu.so", other.path().string()), other.path().string());
}

TEST(CudaPreload, ACudaScanPreloadsLibtorchCudaBesideTheEnginesLibtorchCpu) {
  Installed lib(BATCHCHECK_ELF_RUNPATH_FIXTURE, "elf-env");
  ScopedEnv llp("LD_LIBRARY_PATH", nullptr);
  ScopedEnv preload("LD_PRELOAD", nullptr);
  lib.touch("libtorch_cpu.so");
  // A CPU build of LibTorch: nothing to preload.
  EXPECT_TRUE(engine_environment("cuda", lib.object).empty());
  lib.touch("libtorch_cuda.so");
  const std::string cuda = lib.torchlib() + "/libtorch_cuda.so";
  EXPECT_EQ(engine_environment("cuda", lib.object),
            (std::vector<std::string>{std::string("BATCHCHECK_ENGINE_PRELOAD=") + cuda, "LD_PRELOAD=" + cuda}));
  EXPECT_EQ(engine_environment("cuda:1", lib.object).size(), 2u);
  // A CPU scan maps no CUDA library.
  EXPECT_TRUE(engine_environment("cpu", lib.object).empty());
  {
    // The user's own preload stays, after ours.
    ScopedEnv user("LD_PRELOAD", "libmine.so");
    EXPECT_EQ(engine_environment("cuda", lib.object).back(), "LD_PRELOAD=" + cuda + ":libmine.so");
  }
  {
    // "auto" without a visible GPU is the CPU.
    ScopedEnv hidden("CUDA_VISIBLE_DEVICES", "-1");
    EXPECT_TRUE(engine_environment("auto", lib.object).empty());
  }
}

TEST(CudaPreload, APathLdPreloadCannotNameIsLoadedByTheChild) {
  TempDir parent("elf-space");
  const fs::path dir = parent.path() / "my env";
  fs::create_directories(dir / "torchlib");
  fs::copy_file(BATCHCHECK_ELF_RUNPATH_FIXTURE, dir / "libengine.so");
  std::ofstream(dir / "torchlib" / "libtorch_cpu.so") << "x";
  std::ofstream(dir / "torchlib" / "libtorch_cuda.so") << "x";
  const auto env = engine_environment("cuda", (dir / "libengine.so").string());
  ASSERT_EQ(env.size(), 1u);
  EXPECT_EQ(env[0], "BATCHCHECK_ENGINE_PRELOAD=" + (dir / "torchlib" / "libtorch_cuda.so").string());
}

TEST(CudaPreload, TheChildPutsTheUsersPreloadBackAndLoadsWhatItWasNotGiven) {
  ScopedEnv preload("LD_PRELOAD", "/x/libtorch_cuda.so:libmine.so");
  ScopedEnv named(kEnginePreloadVar, "/x/libtorch_cuda.so");
  // Not loaded at exec, and not there to load: the loader's words.
  const std::string why = preload_engine_libraries();
  EXPECT_NE(why.find("/x/libtorch_cuda.so"), std::string::npos) << why;
  EXPECT_STREQ(std::getenv("LD_PRELOAD"), "libmine.so");
  EXPECT_EQ(std::getenv(kEnginePreloadVar), nullptr);
  // Nothing asked: nothing done.
  EXPECT_EQ(preload_engine_libraries(), "");
}

TEST(CudaPreload, GpuVisibility) {
  EXPECT_FALSE(nvidia_gpu_present(""));
  EXPECT_FALSE(nvidia_gpu_present("-1"));
  EXPECT_FALSE(nvidia_gpu_present(" -1,0"));
  // Otherwise the machine decides: a device node or the driver's GPU list.
  std::error_code ec;
  bool node = fs::exists("/dev/nvidia0", ec) || (fs::is_directory("/proc/driver/nvidia/gpus", ec) && !fs::is_empty("/proc/driver/nvidia/gpus", ec));
  EXPECT_EQ(nvidia_gpu_present(nullptr), node);
}
