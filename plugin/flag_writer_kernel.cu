// The flag-writer kernel (see flag_ring.h for the protocol): one block that polls the
// command ring in mapped host memory and stores each command's 32-bit value at its strided
// device addresses (LL/LL128 flags of a virtual sender's receive). One CUDA driver call per
// receive (a 2D memset, ~4 us of NCCL's proxy thread on the H200) becomes a few host stores.
#include "flag_ring.h"

namespace fr = crystal::plugin::flag_ring;

namespace {

__device__ __forceinline__ unsigned long long globalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace

extern "C" __global__ void crystal_flag_writer(fr::Ring* ring, unsigned long long idle_ns) {
  __shared__ unsigned long long next;
  __shared__ int go;
  __shared__ unsigned long long dst;
  __shared__ unsigned pitch, value, count;
  volatile fr::Ring* r = ring;
  if (threadIdx.x == 0) {
    next = r->done + 1;
    r->starts = r->starts + 1;  // kernels run one at a time (one stream)
  }
  __syncthreads();
  unsigned long long last = globalTimer();
  for (;;) {
    if (threadIdx.x == 0) {
      volatile fr::Command* c = &r->cmds[next % fr::kSize];
      go = 0;
      for (;;) {
        if (c->seq == next) {
          // The fields were stored before seq (x86 store order); read after seeing it.
          dst = c->dst;
          pitch = c->pitch;
          value = c->value;
          count = c->count;
          go = 1;
          break;
        }
        if (globalTimer() - last < idle_ns && r->stop == 0) continue;
        r->state = fr::kExiting;
        __threadfence_system();
        if (c->seq == next && r->stop == 0) {
          r->state = fr::kRunning;
          continue;  // a command came while we were leaving: stay
        }
        break;
      }
    }
    __syncthreads();
    if (!go) return;
    for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
      *reinterpret_cast<volatile unsigned*>(dst + static_cast<unsigned long long>(i) * pitch) =
          value;
    __threadfence();  // every store of this command before `done` says it ran
    __syncthreads();
    if (threadIdx.x == 0) {
      r->done = next;
      ++next;
      last = globalTimer();
    }
    __syncthreads();
  }
}
