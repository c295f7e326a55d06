// The P2P agent kernel (protocol: p2p_agent_abi.h): one block, one thread per connection of
// the real rank to a virtual GPU of its node. It stands in for those GPUs' kernels on the
// real GPU: it shows the CPU how far the real rank's NCCL kernel moved the counters it writes
// into the virtual side's blocks, and moves the real rank's own counters to the values the
// CPU's model released.
//
// A pass is as short as one PCIe read: every load from the mapped table (a warp's 32
// `release` words, `want`, `n`) is issued before any of them is used, and nothing waits for
// a write to reach host memory (no fence in the loop; the stores to R's counters are
// volatile, in the GPU's memory, and R's kernel polls them). The H200 trace of 2026-12-04
// showed ~9 us passes when each thread read its `release` word, then fenced after its store,
// then thread 0 read `want` in turn.
#include "p2p_agent_abi.h"

namespace pa = crystal::plugin::p2p_agent;

namespace {
__device__ __forceinline__ unsigned long long globalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
}  // namespace

extern "C" __global__ void crystal_p2p_agent(pa::Table* table) {
  __shared__ int s_leave, s_trace;
  volatile pa::Table* t = table;
  const unsigned i = threadIdx.x;
  if (i == 0) {
    t->starts = t->starts + 1;
    t->state = pa::kRunning;  // a kernel queued behind one that left finds kExiting
    s_leave = 0;
    s_trace = t->trace != 0;
  }
  const unsigned long long passes_before = i == 0 ? t->passes : 0;
  __syncthreads();
  const bool trace = s_trace != 0;
  bool mine = false;
  volatile unsigned long long* watch = nullptr;
  volatile unsigned long long* target = nullptr;
  unsigned long long seen = ~0ull, stored = 0, passes = 0;
  for (;;) {
    // Loads first, uses after: the table's words travel over PCIe together.
    const unsigned n = mine ? 0u : t->n;
    const unsigned long long r = mine ? t->release[i] : 0;
    const unsigned want = i == 0 ? t->want : 1u;
    const unsigned long long w = mine ? *watch : 0;
    if (mine) {
      if (r != stored) {
        *target = r;
        stored = r;
        if (trace) {
          t->stored_at[i] = globalTimer();
          t->stored[i] = r;
        }
      }
      if (w != seen) {
        if (trace) t->seen_at[i] = globalTimer();
        t->seen[i] = w;
        seen = w;
      }
    } else if (i < n) {  // the CPU filled this connection before raising n
      mine = true;
      watch = reinterpret_cast<volatile unsigned long long*>(t->watch[i]);
      target = reinterpret_cast<volatile unsigned long long*>(t->target[i]);
    }
    if (i == 0) {
      t->passes = passes_before + ++passes;
      if (trace) t->gpu_now = globalTimer();
      if (want == 0) {
        t->state = pa::kExiting;
        __threadfence_system();
        if (t->want == 0)
          s_leave = 1;
        else
          t->state = pa::kRunning;
      }
    }
    __syncthreads();
    if (s_leave) break;
    __syncthreads();
  }
  // Whatever the CPU released last is stored before the kernel goes.
  if (mine) {
    const unsigned long long r = t->release[i];
    if (r != stored) *target = r;
  }
  __threadfence_system();
}
