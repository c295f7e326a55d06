// The GPU-writer kernel (see gpu_writer_ring.h for the protocol): one block that polls the
// command ring in mapped host memory and stores each command's 32-bit value at its strided
// device addresses (LL/LL128 flags of a virtual sender's receive). One CUDA driver call per
// receive (a 2D memset, ~4 us of NCCL's proxy thread on the H200) becomes a few host stores.
//
// Throughput: every read of the ring crosses PCIe (~1-2 us). Warp 0 looks at the next 32
// commands at once (one sequence number per lane, one round trip), then reads the fields of
// those that are there (a second round trip, issued only after their sequence numbers were
// seen, so the fields are the new ones); the whole block then stores them. A kernel that read
// one command at a time, field by field, ran one command per ~7 us on the H200 and set the
// pace of an LL ring (2026-12-03).
#include "gpu_writer_ring.h"

namespace fr = crystal::plugin::writer_ring;

namespace {

__device__ __forceinline__ unsigned long long globalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

constexpr unsigned kAll = 0xffffffffu;

}  // namespace

extern "C" __global__ void crystal_gpu_writer(fr::Ring* ring, unsigned long long idle_ns) {
  __shared__ unsigned long long s_next;
  __shared__ int s_n;
  __shared__ unsigned long long s_dst[32];
  __shared__ unsigned s_pitch[32], s_value[32], s_count[32];
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
          s_pitch[lane] = c->pitch;
          s_value[lane] = c->value;
          s_count[lane] = c->count;
        }
      }
      if (lane == 0) s_n = n;
    }
    __syncthreads();
    const int n = s_n;
    if (n == 0) return;
    for (int k = 0; k < n; ++k) {
      const unsigned long long dst = s_dst[k];
      const unsigned pitch = s_pitch[k], value = s_value[k], count = s_count[k];
      for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
        *reinterpret_cast<volatile unsigned*>(dst + static_cast<unsigned long long>(i) * pitch) =
            value;
    }
    __threadfence();  // every store of these commands before `done` says they ran
    __syncthreads();
    if (threadIdx.x == 0) {
      r->done = s_next + n - 1;
      s_next += n;
    }
    if (threadIdx.x < 32) last = globalTimer();
    __syncthreads();
  }
}
