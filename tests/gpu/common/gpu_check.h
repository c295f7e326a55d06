// Shared prologue of the small CUDA/NCCL programs of tests/gpu/ (hybrid_nccl, proto_check):
// fail-fast checks that name the call, and the environment/clock helpers they all need.
// Each program defines CRYSTAL_GPU_PROGRAM (its name, for messages) before including this.
#pragma once

#include <cuda_runtime.h>
#include <execinfo.h>
#include <nccl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

// A crash says where: on SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT the faulting thread
// prints the signal, the address, its thread id and its stack (glibc's backtrace: a frame in
// a library without an exported symbol reads "lib.so(+0xOFFSET)", which run_device.sh turns
// into a function with addr2line), then dies of the signal as it would have. The plugin never
// installs handlers in someone's program; this is the test program's own. (2026-12-04: the
// kill case ended once in SIGSEGV with nothing to say where.)
namespace crash_report_detail {
inline void say(const char* s) { (void)!::write(2, s, std::strlen(s)); }
inline void sayNumber(unsigned long long v, int base) {
  char buf[32];
  int i = 31;
  buf[i] = '\0';
  do {
    buf[--i] = "0123456789abcdef"[v % static_cast<unsigned>(base)];
    v /= static_cast<unsigned>(base);
  } while (v != 0 && i > 0);
  say(buf + i);
}
inline void onSignal(int sig, siginfo_t* info, void*) {
  say(CRYSTAL_GPU_PROGRAM ": crash: signal ");
  sayNumber(static_cast<unsigned>(sig), 10);
  say(sig == SIGSEGV  ? " (SEGV)"
      : sig == SIGBUS ? " (BUS)"
      : sig == SIGILL ? " (ILL)"
      : sig == SIGFPE ? " (FPE)"
      : sig == SIGABRT ? " (ABRT)"
                       : "");
  say(" at address 0x");
  sayNumber(reinterpret_cast<unsigned long long>(info != nullptr ? info->si_addr : nullptr), 16);
  say(" on thread ");
  sayNumber(static_cast<unsigned long long>(::syscall(SYS_gettid)), 10);
  say("; its stack:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  say(CRYSTAL_GPU_PROGRAM ": crash: end of stack\n");
  ::raise(sig);  // SA_RESETHAND: the default action now (core, exit status 128 + sig)
}
}  // namespace crash_report_detail

inline void installCrashReport() {
  void* warm[2];
  (void)backtrace(warm, 2);  // loads libgcc_s now, not inside the handler
  struct sigaction sa {};
  sa.sa_sigaction = crash_report_detail::onSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::sigaction(sig, &sa, nullptr);
}

}  // namespace gpu_check
