// The P2P agent kernel (protocol: p2p_agent_abi.h): one block, one thread per connection of
// the real rank to a virtual GPU of its node. It stands in for those GPUs' kernels on the
// real GPU: it shows the CPU how far the real rank's NCCL kernel moved the counters it writes
// into the virtual side's blocks, returns send credits at the model's occupancy per slice,
// and stores the receive counters the CPU's model scheduled once they are due and their slot
// is free. Everything on the per-step path stays on the GPU: the CPU only schedules ahead.
#include "p2p_agent_abi.h"

namespace pa = crystal::plugin::p2p_agent;

namespace {

__device__ __forceinline__ unsigned long long globalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

constexpr int kCredits = 8;  // a send connection has at most NCCL_STEPS slices in flight
constexpr unsigned long long kSteps = 8;  // NCCL_STEPS

}  // namespace

extern "C" __global__ void crystal_p2p_agent(pa::Table* table) {
  __shared__ int s_leave;
  volatile pa::Table* t = table;
  const unsigned i = threadIdx.x;
  if (i == 0) {
    t->starts = t->starts + 1;
    t->state = pa::kRunning;  // a kernel queued behind one that left finds kExiting
    s_leave = 0;
  }
  __syncthreads();
  unsigned long long kind = 0;
  volatile unsigned long long* watch = nullptr;
  volatile unsigned long long* target = nullptr;
  unsigned long long seen = 0, stored = 0, floor_seen = 0;
  // send: slices seen and their credits (due, value), a small FIFO
  unsigned long long counted = 0, last_due = 0;
  unsigned long long due[kCredits], value[kCredits];
  int head = 0, count = 0;
  // recv: entries read ahead (a PCIe read each: four are loaded at once, independently)
  constexpr int kAhead = 4;
  unsigned long long rd = 0, wr = 0;
  unsigned long long b_due[kAhead], b_value[kAhead];
  int b_head = 0, b_n = 0;
  for (unsigned pass = 0;; ++pass) {
    const unsigned long long now = globalTimer();
    if (kind == 0 && i < t->n) {  // the CPU filled this connection before raising n
      kind = t->kind[i];
      watch = reinterpret_cast<volatile unsigned long long*>(t->watch[i]);
      target = reinterpret_cast<volatile unsigned long long*>(t->target[i]);
      seen = *watch;
      t->seen[i] = seen;
      // R's own counter as the last kernel left it: a send's credits start from what was
      // returned (slices R sent before this kernel ran get theirs from now on).
      stored = *target;
      counted = kind == pa::kSend && stored < seen ? stored : seen;
      rd = t->sched_read[i];
    }
    if (kind != 0) {
      const unsigned long long w = *watch;
      if (w != seen) {
        seen = w;
        t->seen[i] = w;
      }
      unsigned long long store = stored;
      if (kind == pa::kSend) {
        if (counted < seen) {
          const unsigned long long step = t->slice_steps[i] ? t->slice_steps[i] : 1;
          const unsigned long long occ = t->occ_ns[i];
          while (counted < seen && count < kCredits) {
            counted = counted + step < seen ? counted + step : seen;
            last_due = (now > last_due ? now : last_due) + occ;
            const int k = (head + count) % kCredits;
            due[k] = last_due;
            value[k] = counted;
            ++count;
          }
        }
        while (count > 0 && due[head] <= now) {
          store = value[head];
          head = (head + 1) % kCredits;
          --count;
        }
      } else {
        const unsigned long long rd0 = rd;
        for (;;) {
          if (b_n == 0) {
            if (rd + b_n >= wr) wr = t->sched_write[i];  // read only when all known are taken
            const unsigned long long avail = wr - rd;
            const int k = avail < kAhead ? static_cast<int>(avail) : kAhead;
            if (k == 0) break;
#pragma unroll
            for (int j = 0; j < kAhead; ++j)
              if (j < k) {
                const volatile pa::Entry* e = &t->sched[i][(rd + j) % pa::kDepth];
                b_due[j] = e->due;
                b_value[j] = e->value;
              }
            b_head = 0;
            b_n = k;
          }
          // Due, and its slot free: R emptied up to value - NCCL_STEPS.
          if (b_due[b_head] > now || b_value[b_head] > seen + kSteps) break;
          store = b_value[b_head] > store ? b_value[b_head] : store;
          ++b_head;
          --b_n;
          ++rd;
        }
        if (rd != rd0) t->sched_read[i] = rd;
      }
      if ((pass & 63) == 0) floor_seen = t->release[i];
      if (floor_seen > store) store = floor_seen;
      if (store != stored) {
        *target = store;
        __threadfence();
        stored = store;
      }
    }
    if (i == 0) {
      t->gpu_ns = now;
      t->passes = t->passes + 1;
      // `want` costs a PCIe read that the whole block waits for: every 8th pass.
      if ((pass & 7) == 0 && t->want == 0) {
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
  // The credits of what R sent are its own: a kernel that leaves returns them (the next
  // operation starts after this one's end).
  if (kind == pa::kSend && count > 0) {
    *target = value[(head + count - 1) % kCredits];
  }
  __threadfence_system();
}
