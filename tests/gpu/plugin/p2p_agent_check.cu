// GPU check of the P2P agent kernel (plugin/p2p_agent_kernel.cu) alone, no NCCL: how long the
// agent takes to answer a move of R's counters, the turn every paced slice of R's kernel waits
// on (tests/gpu/hybrid/README.md, thirty-second session: ~2.6 us from R's send to its credit
// in the pacing traces of the split groups, where the model's hop is ~2.5 us).
//
// A stand-in for R's NCCL kernel (one block a channel, as NCCL runs a channel) moves, per
// round, its send connection's counter (V's recv tail: R sent a unit) and waits for the
// credit (R's send head), then moves its receive connection's counter (V's send head: R
// consumed a slot) and waits for its recv tail to follow (the CPU's release is left wide
// open, so the agent's own slot rule moves it at once). Credits due when seen (occupancy 0),
// or 150 ns / 1 us after; a CPU thread busy on the table or not. Each wait is timed on the
// GPU's global timer. The same rounds against "echo", a kernel that only copies each counter
// across (one thread a connection, no table, no timer), give the floor of a flag's round trip
// between two kernels on this GPU.
//
// Prints, per setting (channels, trace on/off, agent or echo), the median / p90 / max of the
// send and receive turns. Exit 1 when a turn never came (100 ms) or a counter went wrong.
//
// H100, 2026-12-06 (run_agent.sh 16 28): with every credit due when seen (occupancy 0) the
// agent answers in ~1 us (median; echo 0.5-1.4), with a CPU thread busy on its table the
// same; with a credit due 150 ns or 1 us after the send, 2.4 us (p90 3.2), whatever the
// occupancy: the credit waits for a later turn of the connection's loop, and that turn takes
// ~2 us. Likely, not yet measured: the turn before it wrote the table (seen, seen_at: stores
// to mapped host memory) and the next load of R's counter waits for them. The emulation's
// traces show the same ~2.6 us between R's send and its credit. Taking an SM of its own (dynamic
// shared memory no NCCL block fits beside) did not change the emulation's times.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "p2p_agent_kernel.cu"

namespace {

#define CUDA_OK(call)                                                                            \
  do {                                                                                           \
    if (const cudaError_t e = (call); e != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

// Counters one 128-byte line apart, as NCCL's head and tail live in separate structures.
constexpr unsigned kLine = 16;  // u64 words
constexpr unsigned kRounds = 2000;
constexpr unsigned long long kTimeoutNs = 100'000'000;     // one turn
constexpr unsigned long long kDeadlineNs = 2'000'000'000;  // all rounds of a setting

struct Counters {
  unsigned long long* base;  // 4 lines a channel: send watch, send target, recv watch, recv target
  __host__ __device__ unsigned long long* at(unsigned ch, unsigned k) const {
    return base + (4 * ch + k) * kLine;
  }
};

// R's stand-in: block `ch` is channel ch. turns[ch * 2 * kRounds + 2r (+1)]: the send (recv)
// turn of round r in ns; ~0 when it never came.
__global__ void fakeR(Counters c, unsigned long long* turns) {
  if (threadIdx.x != 0) return;
  const unsigned ch = blockIdx.x;
  volatile unsigned long long* send_watch = c.at(ch, 0);
  volatile unsigned long long* send_target = c.at(ch, 1);
  volatile unsigned long long* recv_watch = c.at(ch, 2);
  volatile unsigned long long* recv_target = c.at(ch, 3);
  unsigned long long* out = turns + static_cast<unsigned long long>(ch) * 2 * kRounds;
  // The receive's tail starts at head + 8 once the agent saw the connection.
  const unsigned long long start = crystal::plugin::gpu::globalTimer();
  while (*recv_target < 8)
    if (crystal::plugin::gpu::globalTimer() - start > 10 * kTimeoutNs) return;
  for (unsigned r = 0; r < kRounds; ++r) {
    if (crystal::plugin::gpu::globalTimer() - start > kDeadlineNs) return;  // the rest: missing
    const unsigned long long v = 2ull * (r + 1);
    *send_watch = v;  // R sent one unit of 2 steps
    __threadfence();
    unsigned long long t0 = crystal::plugin::gpu::globalTimer(), t1 = t0;
    while (*send_target < v && (t1 = crystal::plugin::gpu::globalTimer()) - t0 < kTimeoutNs) {
    }
    t1 = crystal::plugin::gpu::globalTimer();
    out[2 * r] = *send_target >= v ? t1 - t0 : ~0ull;
    *recv_watch = v;  // R consumed a slot: its tail may move to head + 8
    __threadfence();
    t0 = crystal::plugin::gpu::globalTimer();
    while (*recv_target < v + 8 && (t1 = crystal::plugin::gpu::globalTimer()) - t0 < kTimeoutNs) {
    }
    t1 = crystal::plugin::gpu::globalTimer();
    out[2 * r + 1] = *recv_target >= v + 8 ? t1 - t0 : ~0ull;
  }
}

// The floor: one thread a connection copies R's counter across (a send's as its credit, a
// receive's plus 8), until *stop.
__global__ void echo(Counters c, unsigned channels, volatile int* stop) {
  const unsigned i = threadIdx.x;
  if (i >= 2 * channels) return;
  const unsigned ch = i % channels;
  const bool send = i < channels;
  volatile unsigned long long* watch = c.at(ch, send ? 0 : 2);
  volatile unsigned long long* target = c.at(ch, send ? 1 : 3);
  unsigned long long stored = *target;
  while (!*stop) {
    const unsigned long long v = send ? *watch : *watch + 8;
    if (v > stored) {
      *target = v;
      __threadfence();
      stored = v;
    }
  }
}

struct Turns {
  double median, p90, max;
  unsigned missing;
};

Turns summarize(std::vector<unsigned long long> v) {
  unsigned missing = 0;
  std::vector<double> us;
  for (unsigned long long x : v) {
    if (x == ~0ull)
      ++missing;
    else
      us.push_back(static_cast<double>(x) / 1e3);
  }
  if (us.empty()) return {0, 0, 0, missing};
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 9 / 10], us.back(), missing};
}

int failures = 0;

// One setting: `channels` blocks of R's stand-in against the agent (trace on/off) or echo.
// `cpu_busy`: a CPU thread writes the receives' release words and reads the seen words of
// the table all along, as the pacing thread does while an operation runs.
void run(unsigned channels, bool agent, bool trace, bool cpu_busy = false,
         std::uint64_t occupancy_ns = 0) {
  namespace pa = crystal::plugin::p2p_agent;
  unsigned long long* counters = nullptr;
  CUDA_OK(cudaMalloc(&counters, sizeof(unsigned long long) * 4 * kLine * channels));
  CUDA_OK(cudaMemset(counters, 0, sizeof(unsigned long long) * 4 * kLine * channels));
  const Counters c{counters};
  unsigned long long* turns = nullptr;
  const std::size_t n_turns = std::size_t{2} * kRounds * channels;
  CUDA_OK(cudaMalloc(&turns, sizeof(unsigned long long) * n_turns));
  CUDA_OK(cudaMemset(turns, 0xff, sizeof(unsigned long long) * n_turns));
  cudaStream_t sa, sr;
  CUDA_OK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&sr, cudaStreamNonBlocking));

  pa::Table* table = nullptr;
  int* stop = nullptr;
  if (agent) {
    CUDA_OK(cudaHostAlloc(&table, sizeof(pa::Table), cudaHostAllocMapped));
    std::memset(table, 0, sizeof(pa::Table));
    for (unsigned ch = 0; ch < channels; ++ch) {
      const unsigned s = ch, r = channels + ch;  // sends first, as the pacer adds them
      table->watch[s] = reinterpret_cast<std::uint64_t>(c.at(ch, 0));
      table->target[s] = reinterpret_cast<std::uint64_t>(c.at(ch, 1));
      table->kind[s] = 1;
      table->unit_steps[s] = 2;
      table->occupancy[s] = occupancy_ns;
      table->watch[r] = reinterpret_cast<std::uint64_t>(c.at(ch, 2));
      table->target[r] = reinterpret_cast<std::uint64_t>(c.at(ch, 3));
      table->kind[r] = 0;
      table->release[r] = std::uint64_t{1} << 62;  // wide open: the slot rule alone
    }
    table->trace = trace ? 1 : 0;
    table->n = 2 * channels;
    table->want = 1;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    pa::Table* d_table = nullptr;
    CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_table), table, 0));
    crystal_p2p_agent<<<1, pa::kThreads + pa::kReaderThreads, 0, sa>>>(d_table);
  } else {
    CUDA_OK(cudaHostAlloc(&stop, sizeof(int), cudaHostAllocMapped));
    *stop = 0;
    int* d_stop = nullptr;
    CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_stop), stop, 0));
    echo<<<1, 256, 0, sa>>>(c, channels, d_stop);
  }
  CUDA_OK(cudaGetLastError());
  fakeR<<<channels, 32, 0, sr>>>(c, turns);
  CUDA_OK(cudaGetLastError());
  std::atomic<bool> rounds_done{false};
  std::thread pacer;
  if (agent && cpu_busy)
    pacer = std::thread([&] {
      std::uint64_t sum = 0;
      while (!rounds_done.load(std::memory_order_relaxed))
        for (unsigned ch = 0; ch < channels; ++ch) {
          sum += std::atomic_ref(table->seen[ch]).load(std::memory_order_acquire);
          std::atomic_ref(table->release[channels + ch])
              .store((std::uint64_t{1} << 62) + (sum & 1), std::memory_order_release);
        }
    });
  CUDA_OK(cudaStreamSynchronize(sr));
  rounds_done = true;
  if (pacer.joinable()) pacer.join();
  if (agent) {
    reinterpret_cast<volatile std::uint32_t*>(&table->want)[0] = 0;
  } else {
    reinterpret_cast<volatile int*>(stop)[0] = 1;
  }
  CUDA_OK(cudaStreamSynchronize(sa));

  std::vector<unsigned long long> host(n_turns);
  CUDA_OK(
      cudaMemcpy(host.data(), turns, sizeof(unsigned long long) * n_turns, cudaMemcpyDeviceToHost));
  std::vector<unsigned long long> send, recv;
  for (std::size_t k = 0; k < n_turns; ++k) (k % 2 == 0 ? send : recv).push_back(host[k]);
  const Turns s = summarize(send), r = summarize(recv);
  std::printf(
      "turn %-5s%-9s occupancy %4llu ns channels %2u trace %d: send median %5.2f p90 %5.2f max "
      "%7.2f us; "
      "recv median %5.2f p90 %5.2f max %7.2f us%s\n",
      agent ? "agent" : "echo", cpu_busy ? " cpu busy" : "",
      static_cast<unsigned long long>(occupancy_ns), channels, trace ? 1 : 0, s.median, s.p90,
      s.max, r.median, r.p90, r.max, s.missing + r.missing ? " MISSING" : "");
  if (s.missing + r.missing) {
    std::printf("FAIL: %u send and %u receive turns never came (channels %u, %s)\n", s.missing,
                r.missing, channels, agent ? "agent" : "echo");
    ++failures;
  }
  if (agent) {
    // Every counter the agent moved is the stand-in's last value (sends) or it + 8 (receives).
    std::vector<unsigned long long> end(4 * kLine * channels);
    CUDA_OK(cudaMemcpy(end.data(), counters, sizeof(unsigned long long) * end.size(),
                       cudaMemcpyDeviceToHost));
    for (unsigned ch = 0; ch < channels; ++ch) {
      const unsigned long long last = 2ull * kRounds;
      if (end[(4 * ch + 1) * kLine] != last || end[(4 * ch + 3) * kLine] != last + 8) {
        std::printf("FAIL: channel %u: credit %llu (want %llu), recv tail %llu (want %llu)\n", ch,
                    end[(4 * ch + 1) * kLine], last, end[(4 * ch + 3) * kLine], last + 8);
        ++failures;
      }
    }
    if (table->seen[0] != 2ull * kRounds) {
      std::printf("FAIL: the table's seen[0] is %llu, want %llu\n",
                  static_cast<unsigned long long>(table->seen[0]), 2ull * kRounds);
      ++failures;
    }
    CUDA_OK(cudaFreeHost(table));
  } else {
    CUDA_OK(cudaFreeHost(stop));
  }
  CUDA_OK(cudaStreamDestroy(sa));
  CUDA_OK(cudaStreamDestroy(sr));
  CUDA_OK(cudaFree(turns));
  CUDA_OK(cudaFree(counters));
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Load every kernel now: with lazy loading (CUDA 12's default) the stand-in's first launch
  // would wait for the spinning agent or echo kernel to finish, which waits for the stand-in.
  cudaFuncAttributes attr;
  CUDA_OK(cudaFuncGetAttributes(&attr, fakeR));
  CUDA_OK(cudaFuncGetAttributes(&attr, echo));
  CUDA_OK(cudaFuncGetAttributes(&attr, crystal_p2p_agent));
  std::vector<unsigned> channels{1, 16, 28, 44};
  if (argc > 1) {
    channels.clear();
    for (int k = 1; k < argc; ++k) channels.push_back(static_cast<unsigned>(std::atoi(argv[k])));
  }
  for (unsigned ch : channels) {
    if (ch < 1 || 2 * ch > crystal::plugin::p2p_agent::kThreads) {
      std::printf("FAIL: %u channels: 1..%u\n", ch, crystal::plugin::p2p_agent::kThreads / 2);
      return 1;
    }
    run(ch, false, false);
    run(ch, true, false);
    run(ch, true, true);
    run(ch, true, false, true);
    run(ch, true, false, false, 150);
    run(ch, true, false, false, 1000);
  }
  std::printf(failures ? "FAIL\n" : "PASS\n");
  return failures ? 1 : 0;
}
