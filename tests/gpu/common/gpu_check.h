// Shared prologue of the small CUDA/NCCL programs of tests/gpu/ (hybrid_nccl, proto_check):
// fail-fast checks that name the call, and the environment/clock helpers they all need.
// Each program defines CRYSTAL_GPU_PROGRAM (its name, for messages) before including this.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#ifndef CRYSTAL_GPU_PROGRAM
#error "define CRYSTAL_GPU_PROGRAM (the program's name) before including gpu_check.h"
#endif

// Exit codes: 3 CUDA error, 4 NCCL error (the run scripts read them).
#define CUDA_OK(x)                                                                   \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, CRYSTAL_GPU_PROGRAM ": %s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(3);                                                                  \
    }                                                                                \
  } while (0)
#define NCCL_OK(x)                                                                   \
  do {                                                                               \
    ncclResult_t r_ = (x);                                                           \
    if (r_ != ncclSuccess) {                                                         \
      std::fprintf(stderr, CRYSTAL_GPU_PROGRAM ": %s: %s (%d)\n", #x,                \
                   ncclGetErrorString(r_), static_cast<int>(r_));                    \
      std::exit(4);                                                                  \
    }                                                                                \
  } while (0)

namespace gpu_check {

inline int envInt(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : dflt;
}

// Seconds on the steady clock.
inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace gpu_check
