#include "core/base/allocator.h"
#include "core/base/sanitizer.h"

#include <malloc.h>

namespace batchcheck {

void tune_allocator_for_batches() {
#if defined(__GLIBC__) && !BATCHCHECK_ASAN
  // 32 MiB is glibc's ceiling for the mmap threshold on 64-bit; trimming never pays off
  // in a loop that reallocates the same sizes.
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
#endif
}

}  // namespace batchcheck
