// Is a program's first CUDA call after it waited for a stream slow by itself, without NCCL
// or the plugin? hybrid_nccl's first timed call after its warm-ups took 100-150 us of host
// time where the others took 13-20 (an H100, 64 ranks under p2p_peers; tests/gpu/hybrid/
// README.md, forty-first session), and the more operations the host had run ahead of the GPU
// in the warm-ups, the slower it was.
//
// For each AHEAD in a list: enqueue AHEAD "operations" (an event record, a short kernel of
// --op-us, an event record: what a paced NCCL call puts on the stream) while the GPU is busy,
// so the host runs ahead of it; wait for the stream by polling an event (as hybrid_nccl
// --wait-spin does); then time the host side of one more operation and of the 20 after it.
// Printed per AHEAD: the first operation's host us, the median and max of the next 20.
// A first operation much slower than the rest with a large AHEAD and not with a small one
// says the CUDA driver pays, at the first submission after the drain, for what the run-ahead
// left behind; a target rank running the same program pays it too.
//
// Build and run (on the GPU machine):
//   nvcc -O2 -std=c++17 -Itests/gpu/common -o /tmp/first tests/gpu/hybrid/first_call_probe.cu &&
//   /tmp/first
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "probe.cuh"

namespace {

using Clock = std::chrono::steady_clock;
double usSince(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

struct Marks {
  std::vector<cudaEvent_t> pool;
  size_t next = 0;
  cudaEvent_t get() { return pool[next++ % pool.size()]; }
};

// One operation: mark, kernel, mark (the marks from a pool, as the P2P agent's).
void op(cudaStream_t s, Marks& m, long long op_ns, bool marks) {
  if (marks) PROBE_CUDA(cudaEventRecord(m.get(), s));
  spinNs<<<1, 1, 0, s>>>(op_ns);
  if (marks) PROBE_CUDA(cudaEventRecord(m.get(), s));
}

void waitSpin(cudaStream_t s, cudaEvent_t e) {
  PROBE_CUDA(cudaEventRecord(e, s));
  cudaError_t q;
  while ((q = cudaEventQuery(e)) == cudaErrorNotReady) {
  }
  PROBE_CUDA(q);
}

}  // namespace

int main(int argc, char** argv) {
  double op_us = 200;  // the 1 MiB tree all-reduce's time on 64 ranks
  std::vector<int> aheads = {0, 2, 8, 32, 128, 400, 1000};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--op-us") {
      op_us = std::atof(argv[i + 1]);
    } else if (a == "--ahead") {
      aheads.clear();
      for (const char* p = argv[i + 1]; *p;) {
        char* end = nullptr;
        aheads.push_back(static_cast<int>(std::strtol(p, &end, 10)));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--op-us US] [--ahead N,N,...]\n", argv[0]);
      return 2;
    }
  }
  PROBE_CUDA(cudaSetDevice(0));
  cudaStream_t s;
  PROBE_CUDA(cudaStreamCreate(&s));
  Marks m;
  m.pool.resize(4096);
  for (cudaEvent_t& e : m.pool) PROBE_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaEvent_t done;
  PROBE_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const long long op_ns = static_cast<long long>(op_us * 1000);
  for (int marks = 0; marks <= 1; ++marks) {
    std::printf("# op %.0f us, %s\n", op_us, marks ? "event, kernel, event" : "kernel only");
    std::printf("%8s %12s %12s %12s\n", "ahead", "first_us", "next_med_us", "next_max_us");
    for (int round = 0; round < 2; ++round) {  // the first round warms the driver up
      for (const int ahead : aheads) {
        for (int i = 0; i < ahead; ++i) op(s, m, op_ns, marks != 0);
        waitSpin(s, done);
        auto t = Clock::now();
        op(s, m, op_ns, marks != 0);
        const double first = usSince(t);
        std::vector<double> next;
        for (int i = 0; i < 20; ++i) {
          t = Clock::now();
          op(s, m, op_ns, marks != 0);
          next.push_back(usSince(t));
        }
        waitSpin(s, done);
        std::sort(next.begin(), next.end());
        if (round == 1)
          std::printf("%8d %12.1f %12.1f %12.1f\n", ahead, first, next[next.size() / 2],
                      next.back());
      }
    }
  }
  return 0;
}
