#pragma once
// BATCHCHECK_ASAN: 1 when AddressSanitizer instruments this build, with g++ (which defines
// __SANITIZE_ADDRESS__) or clang (which answers __has_feature). What it changes: allocations
// too large abort instead of failing, and glibc's malloc is not the allocator.
#if defined(__SANITIZE_ADDRESS__)
#define BATCHCHECK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BATCHCHECK_ASAN 1
#endif
#endif
#ifndef BATCHCHECK_ASAN
#define BATCHCHECK_ASAN 0
#endif
