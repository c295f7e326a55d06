// Test support for tests that drive the plugin's net API in-process with the fake CUDA driver:
// what the plugin logged through NCCL's logger, and host buffers standing in for GPU memory.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "crystal/nccl/common.h"

namespace crystal::test {

inline std::mutex captured_log_mu;
inline std::string captured_log;  // every line, '\n'-terminated; tests clear it in SetUp

// An ncclDebugLogger_t for net::init.
inline void captureLog(nccl::ncclDebugLogLevel, unsigned long, const char*, int, const char* fmt,
                       ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard lock(captured_log_mu);
  captured_log += buf;
  captured_log += '\n';
}

inline std::string capturedLog() {
  std::lock_guard lock(captured_log_mu);
  return captured_log;
}

inline void clearCapturedLog() {
  std::lock_guard lock(captured_log_mu);
  captured_log.clear();
}

// Page-aligned host memory the fake driver treats as device memory ("device" memory is not
// zeroed: 0xA5 until written).
struct Buffer {
  std::unique_ptr<std::byte, decltype(&std::free)> p{nullptr, &std::free};
  std::size_t size = 0;
  explicit Buffer(std::size_t n)
      : p(static_cast<std::byte*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096)), &std::free),
        size(n) {
    std::memset(p.get(), 0xA5, n);
  }
  [[nodiscard]] std::byte* at(std::size_t off) const { return p.get() + off; }
  // Pseudo-random bytes from `seed` (a linear congruential sequence).
  void fill(std::uint32_t seed) {
    for (std::size_t i = 0; i < size; ++i) {
      seed = seed * 1664525u + 1013904223u;
      p.get()[i] = std::byte(seed >> 24);
    }
  }
};

}  // namespace crystal::test
