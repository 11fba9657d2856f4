#include "supervise/cuda_preload.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace batchcheck {

namespace {

namespace fs = std::filesystem;

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  // Exactly `n` bytes at `offset`, or false.
  bool read(void* into, std::size_t n, uint64_t offset) const {
    auto* p = static_cast<char*>(into);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (got <= 0) return false;
      p += got;
      n -= static_cast<std::size_t>(got);
      offset += static_cast<uint64_t>(got);
    }
    return true;
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

struct Paths {
  std::string rpath, runpath;
};

// DT_RPATH and DT_RUNPATH of a 64-bit little-endian ELF object (what every platform this
// builds on uses). The file is ours (the engine), but every size is bounded all the same.
std::optional<Paths> dynamic_paths(const std::string& object) {
  Fd f(object);
  if (!f.ok()) return std::nullopt;
  Elf64_Ehdr eh{};
  if (!f.read(&eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 512) {
    return std::nullopt;
  }
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!f.read(ph.data(), ph.size() * sizeof(Elf64_Phdr), eh.e_phoff)) return std::nullopt;
  const Elf64_Phdr* dyn = nullptr;
  for (const auto& p : ph) {
    if (p.p_type == PT_DYNAMIC) dyn = &p;
  }
  if (!dyn || dyn->p_filesz > (1u << 20)) return std::nullopt;
  std::vector<Elf64_Dyn> entries(dyn->p_filesz / sizeof(Elf64_Dyn));
  if (!f.read(entries.data(), entries.size() * sizeof(Elf64_Dyn), dyn->p_offset)) return std::nullopt;
  uint64_t strtab = 0, strsz = 0;
  std::optional<uint64_t> rpath, runpath;
  for (const auto& d : entries) {
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
    if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
    if (d.d_tag == DT_RPATH) rpath = d.d_un.d_val;
    if (d.d_tag == DT_RUNPATH) runpath = d.d_un.d_val;
  }
  // The string table's address, as a position in the file: through the segment that loads it.
  std::optional<uint64_t> table;
  for (const auto& p : ph) {
    if (p.p_type == PT_LOAD && strtab >= p.p_vaddr && strtab < p.p_vaddr + p.p_filesz) table = strtab - p.p_vaddr + p.p_offset;
  }
  if (!table || strsz == 0 || strsz > (64u << 20)) return std::nullopt;
  auto string_at = [&](uint64_t at) -> std::string {
    if (at >= strsz) return "";
    const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(strsz - at, 1u << 16));
    std::string s(n, '\0');
    if (!f.read(s.data(), n, *table + at)) return "";
    return s.substr(0, s.find('\0'));
  };
  Paths out;
  if (rpath) out.rpath = string_at(*rpath);
  if (runpath) out.runpath = string_at(*runpath);
  return out;
}

// A search list split as the loader splits it (':' or ';'), $ORIGIN expanded; entries with
// other tokens ($LIB, $PLATFORM) are left out: nothing of ours uses them.
void append_dirs(std::vector<std::string>& into, const std::string& list, const std::string& origin) {
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = list.find_first_of(":;", start);
    std::string dir = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    for (const char* token : {"${ORIGIN}", "$ORIGIN"}) {
      for (std::size_t at; (at = dir.find(token)) != std::string::npos;) dir.replace(at, std::strlen(token), origin);
    }
    if (dir.empty()) dir = ".";  // an empty entry is the working directory, to the loader
    if (dir.find('$') == std::string::npos) into.push_back(dir);
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

bool wants_cuda(const std::string& device) {
  if (device.rfind("cuda", 0) == 0) return true;
  return device == "auto" && nvidia_gpu_present(std::getenv("CUDA_VISIBLE_DEVICES"));
}

}  // namespace

std::vector<std::string> loader_search_dirs(const std::string& object, const std::string& ld_library_path) {
  const std::optional<Paths> p = dynamic_paths(object);
  if (!p) return {};
  std::error_code ec;
  const fs::path absolute = fs::absolute(object, ec);
  const std::string origin = (ec ? fs::path(object) : absolute).parent_path().string();
  std::vector<std::string> dirs;
  if (p->runpath.empty() && !p->rpath.empty()) append_dirs(dirs, p->rpath, origin);
  if (!ld_library_path.empty()) append_dirs(dirs, ld_library_path, origin);
  if (!p->runpath.empty()) append_dirs(dirs, p->runpath, origin);
  return dirs;
}

std::optional<std::string> find_dependency(const std::string& object, const std::string& soname,
                                           const std::string& ld_library_path) {
  for (const std::string& dir : loader_search_dirs(object, ld_library_path)) {
    std::error_code ec;
    const fs::path candidate = fs::path(dir) / soname;
    if (fs::is_regular_file(candidate, ec)) return fs::absolute(candidate, ec).lexically_normal().parent_path().string();
  }
  return std::nullopt;
}

bool nvidia_gpu_present(const char* cuda_visible_devices) {
  if (cuda_visible_devices) {
    std::string v(cuda_visible_devices);
    v.erase(0, v.find_first_not_of(" \t"));
    // CUDA stops at the first entry it cannot parse: empty or "-1" first hides every GPU.
    if (v.empty() || v[0] == '-') return false;
  }
  std::error_code ec;
  if (fs::is_directory("/proc/driver/nvidia/gpus", ec) && !fs::is_empty("/proc/driver/nvidia/gpus", ec)) return true;
  for (fs::directory_iterator it("/dev", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 && std::isdigit(static_cast<unsigned char>(name[6]))) return true;
  }
  return false;
}

std::vector<std::string> engine_environment(const std::string& device, const std::string& module) {
  if (!wants_cuda(device)) return {};
  const char* llp = std::getenv("LD_LIBRARY_PATH");
  const std::optional<std::string> dir = find_dependency(module, "libtorch_cpu.so", llp ? llp : "");
  if (!dir) return {};
  const std::string cuda = (fs::path(*dir) / "libtorch_cuda.so").string();
  std::error_code ec;
  if (!fs::is_regular_file(cuda, ec)) return {};  // a CPU build of LibTorch
  std::vector<std::string> env{std::string(kEnginePreloadVar) + "=" + cuda};
  // LD_PRELOAD's entries are split at spaces and colons, with no escape: a path holding one is
  // loaded by the child itself, first thing (preload_engine_libraries).
  if (cuda.find_first_of(" :") == std::string::npos) {
    const char* user = std::getenv("LD_PRELOAD");
    env.push_back("LD_PRELOAD=" + cuda + (user && *user ? ":" + std::string(user) : ""));
  }
  return env;
}

std::string preload_engine_libraries() {
  const char* named = std::getenv(kEnginePreloadVar);
  if (!named) return "";
  const std::string lib(named);
  ::unsetenv(kEnginePreloadVar);
  if (const char* preload = std::getenv("LD_PRELOAD"); preload && std::string(preload).rfind(lib, 0) == 0) {
    std::string rest = std::string(preload).substr(lib.size());
    if (!rest.empty() && rest[0] == ':') rest.erase(0, 1);
    if (rest.empty()) {
      ::unsetenv("LD_PRELOAD");
    } else {
      ::setenv("LD_PRELOAD", rest.c_str(), 1);
    }
  }
  if (void* h = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    ::dlclose(h);
    return "";  // loaded at exec
  }
  if (::dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL)) return "";
  const char* why = ::dlerror();
  return why ? why : lib + ": cannot load";
}

}  // namespace batchcheck
