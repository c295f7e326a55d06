// What the single-file GPU probes (tests/gpu/*/..._probe.cu, built with nvcc on the device)
// share: a CUDA runtime check that exits, and a kernel that holds the GPU for a set time.
// Build a probe with -Itests/gpu/common.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

// A CUDA runtime call that must succeed: else the file, line, call and error, and exit 1.
#define PROBE_CUDA(x)                                                                       \
  do {                                                                                      \
    const cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

// Runs `ns` nanoseconds of the GPU's global timer (one thread is enough to hold a stream).
__global__ void spinNs(long long ns) {
  long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 >= ns) break;
  }
}
