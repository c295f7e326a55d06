// The GPU-writer kernel (see gpu_writer_ring.h for the protocol): one block that polls the
// command ring in mapped host memory and runs each command: a 32-bit value stored at strided
// device addresses (LL/LL128 flags of a virtual sender's receive), or bytes copied from one
// device address to another (a real peer's step, GPU to GPU). One CUDA driver call per
// command (a 2D memset, ~4 us of NCCL's proxy thread on the H200; a copy, ~2.5 us under MPS)
// becomes a few host stores.
//
// Throughput: every read of the ring crosses PCIe (~1-2 us). Warp 0 looks at the next 32
// commands at once (one sequence number per lane, one round trip), then reads the fields of
// those that are there (a second round trip, issued only after their sequence numbers were
// seen, so the fields are the new ones); the whole block then stores them. A kernel that read
// one command at a time, field by field, ran one command per ~7 us on the H200 and set the
// pace of an LL ring (2026-12-03).
#include "gpu_timer.cuh"
#include "gpu_writer_ring.h"

namespace fr = crystal::plugin::writer_ring;

namespace {

using crystal::plugin::gpu::globalTimer;

constexpr unsigned kAll = 0xffffffffu;

// `bytes` from src to dst by the whole block. Loads bypass L1 (ld.global.cg): the source is
// the peer's buffer, rewritten by its kernel between two commands of this one, and L1 is not
// coherent. 16-byte words, four in flight a thread, where both ends are 16-byte aligned
// (NCCL's buffers and steps are); the rest byte by byte.
__device__ __forceinline__ void blockCopy(unsigned long long dst, unsigned long long src,
                                          unsigned bytes) {
  unsigned head = 0;
  if (((dst | src) & 15) == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    const unsigned n = bytes / 16, stride = blockDim.x;
    unsigned i = threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
      const uint4 a = __ldcg(s + i), b = __ldcg(s + i + stride), c = __ldcg(s + i + 2 * stride),
                  e = __ldcg(s + i + 3 * stride);
      d[i] = a;
      d[i + stride] = b;
      d[i + 2 * stride] = c;
      d[i + 3 * stride] = e;
    }
    for (; i < n; i += stride) d[i] = __ldcg(s + i);
    head = n * 16;
  }
  const char* s = reinterpret_cast<const char*>(src);
  char* d = reinterpret_cast<char*>(dst);
  for (unsigned i = head + threadIdx.x; i < bytes; i += blockDim.x) d[i] = __ldcg(s + i);
}

}  // namespace

extern "C" __global__ void crystal_gpu_writer(fr::Ring* ring, unsigned long long idle_ns) {
  __shared__ unsigned long long s_next;
  __shared__ int s_n;
  __shared__ unsigned long long s_dst[32], s_arg[32];
  __shared__ unsigned s_count[32], s_kind[32];
  volatile fr::Ring* r = ring;
  const unsigned lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    s_next = r->done + 1;
    r->starts = r->starts + 1;  // kernels run one at a time (one stream)
    // A kernel queued behind one that exited finds "exiting": say it runs, or every post
    // until its idle exit would launch another (harmless, but ~10 us of the proxy each).
    r->state = fr::kRunning;
  }
  __syncthreads();
  unsigned long long last = globalTimer();  // warp 0's view
  for (;;) {
    if (threadIdx.x < 32) {
      const unsigned long long next = s_next;
      int n = 0;
      bool leaving = false;
      for (;;) {
        const bool there = r->cmds[(next + lane) % fr::kSize].seq == next + lane;
        const unsigned mask = __ballot_sync(kAll, there);
        n = mask == kAll ? 32 : __ffs(~mask) - 1;  // consecutive commands from `next`
        if (n > 0 || leaving) break;
        int quit = 0;
        if (lane == 0) quit = globalTimer() - last >= idle_ns;
        if (!__shfl_sync(kAll, quit, 0)) continue;
        // Idle: say so, then look once more (gpu_writer_ring.h: the CPU launches another kernel if
        // it posted after this and saw kExiting).
        if (lane == 0) {
          r->state = fr::kExiting;
          __threadfence_system();
        }
        __syncwarp();
        leaving = true;
      }
      if (n > 0) {
        if (leaving && lane == 0) r->state = fr::kRunning;  // a command came: stay
        if (lane < static_cast<unsigned>(n)) {
          volatile fr::Command* c = &r->cmds[(next + lane) % fr::kSize];
          s_dst[lane] = c->dst;
          s_arg[lane] = c->arg;
          s_count[lane] = c->count;
          s_kind[lane] = c->kind;
        }
      }
      if (lane == 0) s_n = n;
    }
    __syncthreads();
    const int n = s_n;
    if (n == 0) return;
    bool copied = false;
    for (int k = 0; k < n; ++k) {
      const unsigned long long dst = s_dst[k], arg = s_arg[k];
      const unsigned count = s_count[k];
      if (s_kind[k] == fr::kCopy) {
        blockCopy(dst, arg, count);
        copied = true;
        continue;
      }
      if (s_kind[k] == fr::kRelease) {
        __syncthreads();  // every thread's stores of the earlier commands ...
        if (threadIdx.x == 0) {
          __threadfence_system();  // ... seen by the host before the value
          *reinterpret_cast<volatile unsigned long long*>(dst) = arg;
        }
        continue;
      }
      const unsigned pitch = static_cast<unsigned>(arg), value = static_cast<unsigned>(arg >> 32);
      for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
        *reinterpret_cast<volatile unsigned*>(dst + static_cast<unsigned long long>(i) * pitch) =
            value;
    }
    // Every store of these commands before `done` says they ran: NCCL's kernel polls the
    // flags itself (device scope); copied bytes are read once the CPU saw `done` (system).
    if (copied)
      __threadfence_system();
    else
      __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      r->done = s_next + n - 1;
      s_next += n;
    }
    if (threadIdx.x < 32) last = globalTimer();
    __syncthreads();
  }
}
