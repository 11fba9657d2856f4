#pragma once

namespace batchcheck {

// Keeps large freed blocks in the heap instead of returning them to the kernel.
// LibTorch allocates and frees the same large buffers (im2col, activations) every
// batch; with glibc's defaults each becomes mmap + page faults + munmap, which cost
// more than the convolution itself (measured: 15.6 s -> 1.7 s on the P2 benchmark).
void tune_allocator_for_batches();

}  // namespace batchcheck
