#pragma once
// Shared by the engine tests: running a program and capturing its output, temp folders.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace batchcheck::test_util {

struct CommandResult {
  int status = -1;
  std::string output;  // stdout only
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  char buf[65536];
  std::size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, got);
  int st = ::pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// The Python whose torch matches the LibTorch linked (the venv's for the default build,
// Debian's python3-torch for the libtorch-dev build): the interop tests' oracle.
inline std::string python() { return BATCHCHECK_PYTHON; }

inline bool python_torch_available() {
  static const bool ok = run_command(python() + " -c 'import torch, numpy' >/dev/null 2>&1").status == 0;
  return ok;
}

inline std::string python_missing_line(const std::string& what) {
  return python() + " cannot import torch and numpy: " + what + " cannot run (scripts/setup.sh installs them)";
}

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() / ("batchcheck_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A file's bytes ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A bundled sample config (sample_configs/) written into `dir` with absolute paths and `patch`
// merged into it (RFC 7386, e.g. {"loader": {"world_size": 2}}); returns its path.
inline std::string sample_config_in(const TempDir& dir, const std::string& sample,
                                    const nlohmann::json& patch = nlohmann::json::object()) {
  const std::string src = BATCHCHECK_SOURCE_DIR "/sample_configs/";
  nlohmann::json cfg = nlohmann::json::parse(slurp(src + sample));
  for (auto& [section, keys] : cfg.items()) {
    if (!keys.is_object()) continue;
    for (auto& [key, value] : keys.items()) {
      if (value.is_string() && value.get<std::string>().rfind("generated/", 0) == 0) value = src + value.get<std::string>();
    }
  }
  cfg.merge_patch(patch);
  const std::string path = dir.file(sample);
  std::ofstream(path) << cfg.dump(1);
  return path;
}

}  // namespace batchcheck::test_util
