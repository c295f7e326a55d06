// The P2P agent kernel (protocol: p2p_agent_abi.h, rules: p2p_agent_rules.h): one block that
// stands in, on the real GPU, for the kernels of the virtual GPUs of R's node. It shows the
// CPU how far R's NCCL kernel moved the counters it writes into the virtual side's blocks,
// and moves R's own counters: receive tails as far as the CPU's model released and R's slots
// allow, send heads as R's units cross its link.
//
// Connection threads touch only GPU memory, shared memory and the global timer in their
// loop, and write to the mapped table without waiting (posted writes); the reader warp does
// every read of the table. The H200 trace of 2026-12-04 measured a pass that read the table
// at ~8 us, and a step's round trip through the CPU (R's move seen, released, stored) at
// 25-30 us: the per-step reactions now happen here.
#include "gpu_timer.cuh"
#include "p2p_agent_abi.h"
#include "p2p_agent_rules.h"

namespace pa = crystal::plugin::p2p_agent;

using crystal::plugin::gpu::globalTimer;

extern "C" __global__ void crystal_p2p_agent(pa::Table* table) {
  __shared__ unsigned long long s_release[pa::kMaxConns];
  __shared__ unsigned long long s_occupancy[pa::kMaxConns];
  __shared__ unsigned s_steps[pa::kMaxConns];
  __shared__ unsigned s_n;
  __shared__ int s_leave, s_trace;
  volatile pa::Table* t = table;
  volatile unsigned long long* release = s_release;
  volatile unsigned long long* occupancy = s_occupancy;
  volatile unsigned* steps = s_steps;
  volatile unsigned* n_ready = &s_n;
  volatile int* leave = &s_leave;
  const unsigned i = threadIdx.x;
  if (i < pa::kMaxConns) {
    s_release[i] = 0;
    s_occupancy[i] = 0;
    s_steps[i] = 1;
  }
  if (i == 0) {
    t->starts = t->starts + 1;
    t->state = pa::kRunning;  // a kernel queued behind one that left finds kExiting
    s_leave = 0;
    s_n = 0;
    s_trace = t->trace != 0;
  }
  __syncthreads();
  const bool trace = s_trace != 0;

  if (i >= pa::kThreads) {  // the reader warp
    const unsigned lane = i - pa::kThreads;
    constexpr unsigned kPer = pa::kMaxConns / pa::kReaderThreads;
    const unsigned long long passes_before = lane == 0 ? t->passes : 0;
    unsigned long long passes = 0;
    for (;;) {
      // Loads first, uses after: one PCIe round trip per pass.
      const unsigned n = t->n;
      const unsigned want = t->want;
      unsigned long long r[kPer], o[kPer];
      unsigned st[kPer];
#pragma unroll
      for (unsigned k = 0; k < kPer; ++k) {
        const unsigned j = lane + k * pa::kReaderThreads;
        r[k] = t->release[j];
        o[k] = t->occupancy[j];
        st[k] = t->unit_steps[j];
      }
#pragma unroll
      for (unsigned k = 0; k < kPer; ++k) {
        const unsigned j = lane + k * pa::kReaderThreads;
        release[j] = r[k];
        occupancy[j] = o[k];
        steps[j] = st[k];
      }
      __threadfence_block();
      __syncwarp();
      if (lane == 0) {
        *n_ready = n;  // the connections' words above were filled before n was raised
        t->passes = passes_before + ++passes;
        t->gpu_now = globalTimer();  // the CPU maps seen_at onto its clock with it
        if (want == 0) {
          t->state = pa::kExiting;
          __threadfence_system();
          if (t->want == 0)
            *leave = 1;
          else
            t->state = pa::kRunning;
        }
      }
      __syncwarp();
      if (*leave) break;
    }
  } else {  // connection i
    bool mine = false, send = false;
    volatile unsigned long long* watch = nullptr;
    volatile unsigned long long* target = nullptr;
    unsigned long long seen = 0, stored = 0;
    pa::CreditQueue q;
    for (;;) {
      if (*leave) break;
      if (!mine) {
        if (i >= *n_ready) continue;
        mine = true;
        watch = reinterpret_cast<volatile unsigned long long*>(t->watch[i]);
        target = reinterpret_cast<volatile unsigned long long*>(t->target[i]);
        send = t->kind[i] != 0;
        // R's counter as the last kernel (or NCCL's setup) left it: what R sent beyond it
        // (R's kernel may start before this one) is credited from now on.
        stored = *target;
        q.seen = stored;
        seen = ~0ull;  // published on the first pass
      }
      const unsigned long long w = *watch;
      const unsigned long long now = globalTimer();
      if (w != seen) {
        if (send) pa::creditsSent(q, w, now, occupancy[i], steps[i]);
        t->seen_at[i] = now;  // before the value: the CPU reads seen, then seen_at
        t->seen[i] = w;
        seen = w;
      }
      const unsigned long long v =
          send ? pa::creditsDue(q, now) : pa::gatedTail(release[i], w);
      if (v > stored) {
        *target = v;
        __threadfence();  // out to R's kernel now (a store left in the SM's queue slowed R)
        stored = v;
        if (trace) {
          t->stored_at[i] = globalTimer();
          t->stored[i] = v;
        }
      }
    }
    // Leaving: nothing is outstanding (R's operations are done): every unit R sent is
    // credited, and a receive gets the CPU's last release within R's slots.
    if (mine) {
      const unsigned long long v = send ? *watch : pa::gatedTail(t->release[i], *watch);
      if (v > stored) *target = v;
    }
  }
  __threadfence_system();
}
