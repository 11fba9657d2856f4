#include "engine/data/pt_mapped.h"

#include <sys/mman.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/base/errors.h"
#include "core/parse/zip.h"

namespace batchcheck {

MappedFile::MappedFile(const std::string& path, const std::string& display) : display_(display) {
  std::ifstream probe(path, std::ios::binary | std::ios::ate);
  if (!probe) throw InputError(display, "", "cannot read: " + std::string(std::strerror(errno)));
  size_ = static_cast<std::size_t>(probe.tellg());
  if (size_ == 0) throw InputError(display, "", "is empty, not a file written by torch.save");
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw InputError(display, "", "cannot read: " + std::string(std::strerror(errno)));
  void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(f), 0);
  const int map_errno = errno;
  fd_ = p == MAP_FAILED ? -1 : ::dup(fileno(f));
  const int dup_errno = errno;
  std::fclose(f);
  if (p == MAP_FAILED) throw InputError(display, "", "cannot map it into memory: " + std::string(std::strerror(map_errno)));
  if (fd_ < 0) {
    ::munmap(p, size_);
    throw InputError(display, "", "cannot read: " + std::string(std::strerror(dup_errno)));
  }
  data_ = static_cast<char*>(p);
}

MappedFile::~MappedFile() {
  ::munmap(data_, size_);
  ::close(fd_);
}

void MappedFile::release() const { ::madvise(data_, size_, MADV_DONTNEED); }

void MappedFile::read_at(const void* p, std::size_t n, void* dst) const {
  uint64_t offset = static_cast<uint64_t>(static_cast<const char*>(p) - data_);
  char* out = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw InputError(display_, "", std::string("cannot read: ") + (got < 0 ? std::strerror(errno) : "the file shrank while it was read"));
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<std::size_t>(got);
  }
}

at::Tensor read_copy(const at::Tensor& t, const MappedFile& map) {
  if (!t.is_contiguous() || !map.contains(t.data_ptr(), static_cast<std::size_t>(t.nbytes()))) return t;
  at::Tensor out = at::empty(t.sizes(), t.options());
  map.read_at(t.data_ptr(), static_cast<std::size_t>(t.nbytes()), out.data_ptr());
  return out;
}

c10::IValue unpickle_mapped(const std::shared_ptr<MappedFile>& map, const std::string& display) {
  const std::string_view file = map->bytes();
  std::string problem;
  auto members = zip_members(file, problem);
  if (!members) throw InputError(display, "", "not a usable torch.save file: " + problem);
  const std::string root = archive_root(*members);  // check_torch_save found it
  const ZipMember& pkl = members->at(root + "data.pkl");
  const std::string_view pickle = file.substr(pkl.offset, pkl.size);
  uint64_t version = 3;  // what torch.save has written since 1.6
  for (const char* name : {".data/version", "version"}) {
    auto it = members->find(root + name);
    if (it == members->end() || !it->second.stored) continue;
    const std::string text(file.substr(it->second.offset, std::min<uint64_t>(it->second.size, 20)));
    if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0]))) version = std::stoull(text);
    break;
  }
  std::size_t pos = 0;
  auto reader = [&](char* buffer, std::size_t len) -> std::size_t {
    const std::size_t n = std::min(len, pickle.size() - pos);
    std::memcpy(buffer, pickle.data() + pos, n);
    pos += n;
    return n;
  };
  auto read_record = [&](const std::string& key) -> at::DataPtr {
    auto it = members->find(root + "data/" + key);
    if (it == members->end() || !it->second.stored) {
      throw InputError(display, "", "its storage " + key + " is missing or compressed (torch.save stores it uncompressed)");
    }
    // Each storage holds the mapping alive; the source's own reference may go first.
    auto* owner = new std::shared_ptr<MappedFile>(map);
    return at::DataPtr(map->data() + it->second.offset, owner,
                       [](void* ctx) { delete static_cast<std::shared_ptr<MappedFile>*>(ctx); }, at::kCPU);
  };
  torch::jit::Unpickler unpickler(reader, nullptr, nullptr, read_record, c10::nullopt);
  unpickler.set_version(version);
  return unpickler.parse_ivalue();
}

}  // namespace batchcheck
