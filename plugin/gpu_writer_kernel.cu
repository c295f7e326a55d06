// The GPU-writer kernel (see gpu_writer_ring.h for the protocol): block 0, the leader, polls
// the command ring in mapped host memory and runs each command: a 32-bit value stored at
// strided device addresses (LL/LL128 flags of a virtual sender's receive), or bytes copied from
// one device address to another (a real peer's step, GPU to GPU). One CUDA driver call per
// command (a 2D memset, ~4 us of NCCL's proxy thread on the H200; a copy, ~2.5 us under MPS)
// becomes a few host stores.
//
// Copies of more than one chunk are shared with the other blocks, the helpers (the "team"
// below): one block keeps ~64 KiB of loads in flight and copies ~47 GB/s on an H100, where the
// target's NVLink moves ~400; 16 blocks ~325 (2026-12-06, tests/gpu/plugin/run_writer.sh).
// The leader publishes a batch's copies as chunks in device memory and every block, the
// leader too, claims chunks one at a time until none is left; the leader then waits only for chunks that were claimed. No block
// ever waits for another to start: a helper that is not resident (the GPU full of NCCL's
// blocks) just claims nothing, and the leader copies alone.
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
// coherent. 16-byte words, kInFlight loads in flight a thread (64 KiB a block of 512), where
// both ends are 16-byte aligned (NCCL's buffers and steps are); the rest byte by byte.
constexpr int kInFlight = 8;
__device__ __forceinline__ void blockCopy(unsigned long long dst, unsigned long long src,
                                          unsigned bytes) {
  unsigned head = 0;
  if (((dst | src) & 15) == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    const unsigned n = bytes / 16, stride = blockDim.x;
    unsigned i = threadIdx.x;
    for (; i + (kInFlight - 1) * stride < n; i += kInFlight * stride) {
      uint4 v[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) v[j] = __ldcg(s + i + j * stride);
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) d[i + j * stride] = v[j];
    }
    for (; i < n; i += stride) d[i] = __ldcg(s + i);
    head = n * 16;
  }
  const char* s = reinterpret_cast<const char*>(src);
  char* d = reinterpret_cast<char*>(dst);
  for (unsigned i = head + threadIdx.x; i < bytes; i += blockDim.x) d[i] = __ldcg(s + i);
}

// What the blocks of one kernel share, in the module's device memory (one module per writer,
// zeroed when it loads; kept across launches, which run one at a time on the writer's stream).
//   work: batch number (high 32 bits) | chunks claimed (16) | chunks in the batch (16). A
//     block claims with one atomicAdd of kClaim: the old word it gets back names the batch
//     and the chunk it now holds, or says every chunk was taken (claimed >= chunks; each block
//     over-claims at most once a batch, so the field never reaches the batch number). An add
//     that lands after the leader replaced the word claims in the new batch, which is as good.
//     A compare-and-swap on the word (the first version) let 8 blocks claim only ~1.4 M chunks
//     a second between them, ~91 GB/s in 64 KiB chunks on an H100 (2026-12-06).
//   The descriptor is written by the leader before it publishes the batch's word and rewritten
//   only after every chunk of it is copied: a block holding a claim reads the batch it claimed
//   from (once a batch: blocks keep a copy in shared memory).
struct Descriptor {
  unsigned chunk;        // bytes a chunk
  unsigned first[33];    // the first chunk of each copy; after the last copy: chunks in all
  unsigned bytes[32];
  unsigned long long dst[32], src[32];
};
struct Team {
  unsigned long long work;
  unsigned long long finished;  // chunks copied, every batch of every launch
  unsigned long long quit;      // the launch whose leader left: its helpers return
  Descriptor d;
};
__device__ Team g_team;

constexpr unsigned long long kClaim = 1ull << 16;

// A block's copy of the descriptor of batch `batch` (~0: none yet).
struct Batch {
  unsigned long long batch;
  Descriptor d;
};
__shared__ Batch s_desc;

// Copies claimed chunks until none is left (the whole block), then counts them in `finished`
// after the block's fence (one a batch): the leader reads `finished`, fences system-wide and
// only then says the batch ran.
__device__ void copyClaimedChunks() {
  __shared__ int s_chunk;
  __shared__ unsigned long long s_batch;
  volatile Team* t = &g_team;
  unsigned copied = 0;  // chunks this block copied (every thread counts)
  for (;;) {
    if (threadIdx.x == 0) {
      const unsigned long long old = atomicAdd(&g_team.work, kClaim);
      const unsigned claimed = (old >> 16) & 0xffff, total = old & 0xffff;
      s_chunk = claimed < total ? static_cast<int>(claimed) : -1;
      s_batch = old >> 32;
      __threadfence();  // the descriptor reads below come after the claim
    }
    __syncthreads();
    const int chunk = s_chunk;
    if (chunk < 0) break;
    Descriptor& d = s_desc.d;
    if (s_batch != s_desc.batch) {  // a new batch: its descriptor, one read a field a thread
      const unsigned i = threadIdx.x;
      volatile Descriptor& g = t->d;
      if (i < 32) {
        d.first[i] = g.first[i];
        d.bytes[i] = g.bytes[i];
        d.dst[i] = g.dst[i];
        d.src[i] = g.src[i];
      } else if (i == 32) {
        d.first[32] = g.first[32];
        d.chunk = g.chunk;
      }
      __syncthreads();
      if (i == 0) s_desc.batch = s_batch;
    }
    // The copy that holds the chunk: first[k] <= chunk < first[k + 1].
    unsigned k = 0;
    while (d.first[k + 1] <= static_cast<unsigned>(chunk)) ++k;
    const unsigned long long off = static_cast<unsigned long long>(chunk - d.first[k]) * d.chunk;
    const unsigned len =
        static_cast<unsigned>(min(static_cast<unsigned long long>(d.chunk), d.bytes[k] - off));
    blockCopy(d.dst[k] + off, d.src[k] + off, len);
    ++copied;
    __syncthreads();  // every thread read s_chunk and s_desc before thread 0 claims again
  }
  if (copied > 0) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(&g_team.finished, static_cast<unsigned long long>(copied));
  }
}

// A helper block: claims chunks whenever a batch has some left, until its leader leaves.
__device__ void help(unsigned long long launch) {
  volatile Team* t = &g_team;
  __shared__ int s_quit;
  for (;;) {
    copyClaimedChunks();
    if (threadIdx.x == 0) {
      // Poll device memory (L2), not the ring: no PCIe traffic, and a sleep between looks.
      unsigned long long w;
      while (((w = t->work) >> 16 & 0xffff) >= (w & 0xffff) && t->quit != launch)
        __nanosleep(100);
      s_quit = t->quit == launch;
    }
    __syncthreads();
    if (s_quit) return;
  }
}

}  // namespace

// launch: this launch's number (the host counts them; a helper returns once the leader of its
// own launch left). chunk: bytes a helper claims at a time (a multiple of 16).
extern "C" __global__ void crystal_gpu_writer(fr::Ring* ring, unsigned long long idle_ns,
                                              unsigned long long launch, unsigned chunk) {
  if (threadIdx.x == 0) s_desc.batch = ~0ull;
  __syncthreads();
  if (blockIdx.x > 0) {
    help(launch);
    return;
  }
  __shared__ unsigned long long s_next, s_batch, s_finished;
  __shared__ int s_n;
  __shared__ unsigned long long s_dst[32], s_arg[32];
  __shared__ unsigned s_count[32], s_kind[32];
  volatile fr::Ring* r = ring;
  volatile Team* t = &g_team;
  const unsigned lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    s_next = r->done + 1;
    r->starts = r->starts + 1;  // kernels run one at a time (one stream)
    // A kernel queued behind one that exited finds "exiting": say it runs, or every post
    // until its idle exit would launch another (harmless, but ~10 us of the proxy each).
    r->state = fr::kRunning;
    s_batch = t->work >> 32;
    s_finished = t->finished;  // every chunk of earlier launches was copied
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
    if (n == 0) {
      if (threadIdx.x == 0) t->quit = launch;  // the helpers return
      return;
    }
    // Copies: to the team when there are helpers and more than one chunk, else this block's.
    unsigned long long copy_bytes = 0;
    bool copied = false, release = false;
    for (int k = 0; k < n; ++k) {
      if (s_kind[k] == fr::kCopy) copy_bytes += s_count[k], copied = true;
      release |= s_kind[k] == fr::kRelease;
    }
    const bool team = gridDim.x > 1 && copy_bytes > chunk;
    unsigned long long target = 0;
    if (team) {
      // Chunks in a batch fit in 16 bits (at most 0xff00 + one partial chunk a copy): larger
      // chunks for a huge batch.
      const unsigned long long c =
          max(static_cast<unsigned long long>(chunk), (copy_bytes / 0xff00 + 16) & ~15ull);
      if (threadIdx.x < 32) {
        const bool is_copy = lane < static_cast<unsigned>(n) && s_kind[lane] == fr::kCopy;
        const unsigned mine = is_copy ? static_cast<unsigned>((s_count[lane] + c - 1) / c) : 0;
        // Exclusive prefix over the copies, in command order.
        unsigned sum = mine;
        for (int d = 1; d < 32; d <<= 1) {
          const unsigned x = __shfl_up_sync(kAll, sum, d);
          if (lane >= static_cast<unsigned>(d)) sum += x;
        }
        const unsigned slot = __popc(__ballot_sync(kAll, is_copy) & ((1u << lane) - 1));
        if (is_copy) {
          t->d.first[slot] = sum - mine;
          t->d.bytes[slot] = s_count[lane];
          t->d.dst[slot] = s_dst[lane];
          t->d.src[slot] = s_arg[lane];
        }
        const unsigned copies = __popc(__ballot_sync(kAll, is_copy));
        const unsigned total = __shfl_sync(kAll, sum, 31);
        __threadfence();  // every lane's part of the descriptor before the word that publishes it
        __syncwarp();
        if (lane == 0) {
          t->d.first[copies] = total;
          t->d.chunk = static_cast<unsigned>(c);
          __threadfence();
          s_batch += 1;
          t->work = s_batch << 32 | total;
          s_finished += total;
        }
      }
      __syncthreads();
      target = s_finished;
    }
    for (int k = 0; k < n; ++k) {
      const unsigned long long dst = s_dst[k], arg = s_arg[k];
      const unsigned count = s_count[k];
      if (s_kind[k] == fr::kCopy) {
        if (!team) blockCopy(dst, arg, count);
        continue;
      }
      if (s_kind[k] == fr::kRelease) continue;  // after every copy of the batch, below
      const unsigned pitch = static_cast<unsigned>(arg), value = static_cast<unsigned>(arg >> 32);
      for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
        *reinterpret_cast<volatile unsigned*>(dst + static_cast<unsigned long long>(i) * pitch) =
            value;
    }
    if (team) {
      copyClaimedChunks();
      // Chunks other blocks claimed may still be copying: wait for their count.
      if (threadIdx.x == 0)
        while (t->finished < target) {
        }
    }
    // Every store of these commands before `done` says they ran: NCCL's kernel polls the
    // flags itself (device scope); copied bytes are read once the CPU saw `done` (system),
    // and so is a release's value (the GPU's acknowledgement of a copy).
    if (copied || release)
      __threadfence_system();
    else
      __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      // A kRelease runs after every earlier command: here, after the whole batch.
      for (int k = 0; k < n; ++k)
        if (s_kind[k] == fr::kRelease)
          *reinterpret_cast<volatile unsigned long long*>(s_dst[k]) = s_arg[k];
      r->done = s_next + n - 1;
      s_next += n;
    }
    if (threadIdx.x < 32) last = globalTimer();
    __syncthreads();
  }
}
