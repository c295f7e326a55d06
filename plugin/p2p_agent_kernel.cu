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
// 25-30 us: the per-step reactions now happen here. So does an armed operation's start
// (preludes: its first receives, timed from when R took the last operation's receives).
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
  // Preludes (p2p_agent_abi.h): the reader's copy of the CPU's words; the schedule in one of
  // two buffers by pre_seq's parity (the last operation's prelude may still run).
  __shared__ unsigned long long s_pre_at[2][pa::kPreUnits];
  __shared__ unsigned long long s_pre_value[pa::kMaxConns];
  __shared__ unsigned long long s_pre_start, s_pre_delay;
  __shared__ unsigned s_pre_units[2], s_pre_steps[2];
  __shared__ unsigned s_pre_seq;
  volatile pa::Table* t = table;
  volatile unsigned long long* release = s_release;
  volatile unsigned long long* occupancy = s_occupancy;
  volatile unsigned* steps = s_steps;
  volatile unsigned* n_ready = &s_n;
  volatile int* leave = &s_leave;
  volatile unsigned long long* pre_value = s_pre_value;
  volatile unsigned long long* pre_start = &s_pre_start;
  volatile unsigned long long* pre_delay = &s_pre_delay;
  volatile unsigned* pre_seq = &s_pre_seq;
  const unsigned i = threadIdx.x;
  if (i < pa::kMaxConns) {
    s_release[i] = 0;
    s_occupancy[i] = 0;
    s_steps[i] = 1;
    s_pre_value[i] = pa::kNoPrelude;
  }
  if (i < 2) {
    s_pre_units[i] = 0;
    s_pre_steps[i] = 1;
  }
  if (i == 0) {
    s_pre_seq = 0;
    s_pre_start = 0;
    s_pre_delay = 0;
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
    unsigned copied_seq = 0;  // the prelude last copied
    for (;;) {
      // Loads first, uses after: one PCIe round trip per pass.
      const unsigned n = t->n;
      const unsigned want = t->want;
      const unsigned seq = __shfl_sync(0xffffffffu, t->pre_seq, 0);  // one value for the warp
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
      if (seq != copied_seq) {
        // A new prelude: its words were written before pre_seq, so read after it (a second
        // round trip, once an operation).
        __threadfence_system();
        const unsigned b = seq & 1;
        const unsigned long long at = t->pre_at[lane];
        const unsigned units = t->pre_units, unit_steps = t->pre_steps;
        const unsigned long long start = t->pre_start, delay = t->pre_delay;
        unsigned long long pv[kPer];
#pragma unroll
        for (unsigned k = 0; k < kPer; ++k) pv[k] = t->pre_value[lane + k * pa::kReaderThreads];
        static_cast<volatile unsigned long long*>(s_pre_at[b])[lane] = at;
#pragma unroll
        for (unsigned k = 0; k < kPer; ++k) pre_value[lane + k * pa::kReaderThreads] = pv[k];
        if (lane == 0) {
          static_cast<volatile unsigned*>(s_pre_units)[b] = units < pa::kPreUnits ? units : pa::kPreUnits;
          static_cast<volatile unsigned*>(s_pre_steps)[b] = unit_steps;
          *pre_start = start;
          *pre_delay = delay;
        }
        __threadfence_block();
        __syncwarp();
        if (lane == 0) *pre_seq = seq;  // after the words: the connections read it first
        copied_seq = seq;
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
    // Preludes (receives): the arm this thread took, its base, start and delay while pending,
    // R's head before its last change (anchorOf; 0 before the first look), and the prelude
    // running (its buffer) with what it released.
    unsigned arm = 0, buf = 0, p_buf = 0;
    bool pending = false;
    unsigned long long base = 0, start = 0, delay = 0, prev = 0, changed_at = 0, pre = 0;
    pa::Prelude p;
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
        prev = seen == ~0ull ? 0 : seen;  // the first look: R's head moved "from 0"
        changed_at = now;
        seen = w;
      }
      if (!send) {
        const unsigned seq = *pre_seq;
        if (seq != arm) {  // a new arm; the prelude running goes on (its buffer stays)
          arm = seq;
          base = pre_value[i];
          pending = base != pa::kNoPrelude;
          start = *pre_start;
          delay = *pre_delay;
          buf = seq & 1;
        }
        if (pending) {
          const unsigned long long a = pa::anchorOf(base, prev, seen, changed_at, start, delay);
          if (a != pa::kAnchorPending) {
            pending = false;
            if (a != pa::kAnchorMissed) {
              p = pa::Prelude{a, base, 0};
              p_buf = buf;
            }
            t->anchor_at[i] = a;  // before its arm, as seen_at before seen
            t->anchor_seq[i] = arm;
          }
        }
        if (p.anchor > pa::kAnchorMissed)
          pre = pa::preludeTail(p, static_cast<volatile unsigned long long*>(s_pre_at[p_buf]),
                                static_cast<volatile unsigned*>(s_pre_units)[p_buf],
                                static_cast<volatile unsigned*>(s_pre_steps)[p_buf], now);
      }
      const unsigned long long r = release[i];
      const unsigned long long v =
          send ? pa::creditsDue(q, now) : pa::gatedTail(r > pre ? r : pre, w);
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
