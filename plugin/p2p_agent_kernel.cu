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
constexpr int kAhead = 4;                  // receive entries looked at per pass

}  // namespace

// Each pass costs about one PCIe round trip per warp: the loads a thread needs from the
// table are independent and issued together; no barrier (a thread leaves when thread 0 says
// so through shared memory).
extern "C" __global__ void crystal_p2p_agent(pa::Table* table) {
  volatile __shared__ int s_leave;
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
  // recv: the next entry's index
  unsigned long long rd = 0;
  unsigned long long passes = 0;
  for (unsigned pass = 0; !s_leave; ++pass) {
    const unsigned long long now = globalTimer();
    if (kind == 0 && (pass & 15) == 0 && i < t->n) {  // filled before n was raised
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
      unsigned long long store = stored;
      if (kind == pa::kSend) {
        const unsigned long long w = *watch;
        const unsigned long long steps = t->slice_steps[i];
        const unsigned long long occ = t->occ_ns[i];
        if (w != seen) {
          seen = w;
          t->seen[i] = w;
        }
        const unsigned long long step = steps ? steps : 1;
        while (counted < seen && count < kCredits) {
          counted = counted + step < seen ? counted + step : seen;
          last_due = (now > last_due ? now : last_due) + occ;
          const int k = (head + count) % kCredits;
          due[k] = last_due;
          value[k] = counted;
          ++count;
        }
        while (count > 0 && due[head] <= now) {
          store = value[head];
          head = (head + 1) % kCredits;
          --count;
        }
      } else {
        const unsigned long long w = *watch;
        unsigned long long e_seq[kAhead], e_due[kAhead], e_value[kAhead];
#pragma unroll
        for (int j = 0; j < kAhead; ++j) {
          const volatile pa::Entry* e = &t->sched[i][(rd + j) % pa::kDepth];
          e_seq[j] = e->seq;
          e_due[j] = e->due;
          e_value[j] = e->value;
        }
        if (w != seen) {
          seen = w;
          t->seen[i] = w;
        }
        const unsigned long long rd0 = rd;
#pragma unroll
        for (int j = 0; j < kAhead; ++j) {
          // There (its seq), due, and its slot free: R emptied up to value - NCCL_STEPS. A
          // seq read before its due/value could pair with old fields: the CPU writes seq last
          // and a slot is rewritten only kDepth entries later, after this one was taken.
          if (rd != rd0 + j || e_seq[j] != rd + 1 || e_due[j] > now || e_value[j] > seen + kSteps)
            break;
          store = e_value[j] > store ? e_value[j] : store;
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
      t->passes = ++passes;
      // `want` costs a PCIe read: every 8th pass.
      if ((pass & 7) == 0 && t->want == 0) {
        t->state = pa::kExiting;
        __threadfence_system();
        if (t->want == 0)
          s_leave = 1;
        else
          t->state = pa::kRunning;
      }
    }
  }
  // The credits of what R sent are its own: a kernel that leaves returns them (the next
  // operation starts after this one's end).
  if (kind == pa::kSend && count > 0) *target = value[(head + count - 1) % kCredits];
  __threadfence_system();
}
