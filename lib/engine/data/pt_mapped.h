#pragma once
// A torch.save file mapped into memory for LibTorch's unpickler (pt_source.cpp's storage).
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace batchcheck {

// The file mapped copy-on-write, so that the unpickler's tensors can point into it without a
// copy. Batches are read from the file with positioned reads (read_at), never through the
// mapping: a page fault maps a whole page-cache folio (up to megabytes), so a batch of
// scattered rows read through it would page in most of the file. Memory then does not grow
// with the dataset, as with .npy.
class MappedFile {
 public:
  // Throws InputError.
  MappedFile(const std::string& path, const std::string& display);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {data_, size_}; }
  char* data() const { return data_; }
  // Gives back the pages read through the mapping; unmodified pages come back from the file
  // when read again.
  void release() const;
  bool contains(const void* p, std::size_t n) const {
    const char* c = static_cast<const char*>(p);
    return c >= data_ && n <= size_ && static_cast<std::size_t>(c - data_) <= size_ - n;
  }
  // The bytes the mapping shows at `p`, read from the file instead. Throws InputError.
  void read_at(const void* p, std::size_t n, void* dst) const;

 private:
  std::string display_;
  char* data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;
};

// A copy of a sample tensor, read from the file when it lies in the mapping.
at::Tensor read_copy(const at::Tensor& t, const MappedFile& map);

// torch.load's reading of a torch.save zip, with each storage pointing into the mapping
// instead of a copy: LibTorch's own unpickler, fed the pickle and the members' addresses.
// check_torch_save() must have checked the pickle and every storage's bounds. Throws
// InputError, or LibTorch's own errors.
c10::IValue unpickle_mapped(const std::shared_ptr<MappedFile>& map, const std::string& display);

}  // namespace batchcheck
