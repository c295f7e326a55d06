// What the LD_PRELOAD interposer (plugin/interpose/) adds to each NCCL call the program makes
// on an emulated communicator: the communicator lookups, the mirror plan (none under data
// policy none) and the pacing check (no P2P agent), in front of the tests' fake NCCL. The
// baseline is the same fake entry point called directly (dlsym on libnccl.so.2), in the same
// run. An all-to-all of 64 ranks is 128 such calls, and the emulated rank's host time per
// call decides small broadcasts (2026-12-04: 14-24 us a call against real NCCL's 7-10).
// Target: < 0.2 us added a call.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>

#include "crystal/control/server.h"
#include "fake_nccl.h"
#include "recording_handler.h"

extern "C" {
struct BenchId {
  char internal[128];
};
int ncclGetUniqueId(BenchId*);
int ncclCommInitRank(void**, int, BenchId, int);
int ncclAllReduce(const void*, void*, std::size_t, int, int, void*, void*);
int ncclSend(const void*, std::size_t, int, int, void*, void*);
int ncclRecv(void*, std::size_t, int, int, void*, void*);
int ncclGroupStart();
int ncclGroupEnd();
}

namespace {

using namespace crystal;
using AllReduceFn = int (*)(const void*, void*, std::size_t, int, int, void*, void*);
using SendFn = int (*)(const void*, std::size_t, int, int, void*, void*);
using RecvFn = int (*)(void*, std::size_t, int, int, void*, void*);
using GroupFn = int (*)();

// A 64-rank communicator registered with a host, and the fake NCCL's own entry points.
struct Setup {
  control::testing::RecordingHandler handler;
  control::ControlServer server{handler, {}};
  void* comm = nullptr;
  AllReduceFn all_reduce = nullptr;
  SendFn send = nullptr;
  RecvFn recv = nullptr;
  GroupFn group_start = nullptr, group_end = nullptr;
  Setup() {
    fakeNcclSetHook(nullptr);
    ::setenv("CRYSTAL_HOST", server.address().c_str(), 1);
    BenchId id{};
    if (ncclGetUniqueId(&id) != 0 || ncclCommInitRank(&comm, 64, id, 0) != 0) std::abort();
    void* nccl = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (nccl == nullptr) std::abort();
    all_reduce = reinterpret_cast<AllReduceFn>(::dlsym(nccl, "ncclAllReduce"));
    send = reinterpret_cast<SendFn>(::dlsym(nccl, "ncclSend"));
    recv = reinterpret_cast<RecvFn>(::dlsym(nccl, "ncclRecv"));
    group_start = reinterpret_cast<GroupFn>(::dlsym(nccl, "ncclGroupStart"));
    group_end = reinterpret_cast<GroupFn>(::dlsym(nccl, "ncclGroupEnd"));
    if (!all_reduce || !send || !recv || !group_start || !group_end) std::abort();
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

template <typename F>
double nsPerCall(int calls, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         calls;
}

// Runs `interposed` and `direct` (each `calls` NCCL calls) alternately and prints the ns
// a call of each and what the interposer adds.
template <typename Interposed, typename Direct>
void compare(benchmark::State& state, int calls, Interposed&& interposed, Direct&& direct) {
  double through = 0, plain = 0;
  long rounds = 0;
  for (auto _ : state) {
    through += nsPerCall(calls, interposed);
    plain += nsPerCall(calls, direct);
    ++rounds;
  }
  state.counters["interposed_ns_per_call"] = through / rounds;
  state.counters["direct_ns_per_call"] = plain / rounds;
  state.counters["added_ns_per_call"] = (through - plain) / rounds;
  state.counters["added_under_200ns"] = (through - plain) / rounds < 200 ? 1 : 0;
}

void BM_InterposedAllReduce(benchmark::State& state) {
  Setup& s = setup();
  float x = 0;
  constexpr int kCalls = 256;
  compare(
      state, kCalls,
      [&] {
        for (int i = 0; i < kCalls; ++i)
          benchmark::DoNotOptimize(ncclAllReduce(&x, &x, 1, 7, 0, s.comm, nullptr));
      },
      [&] {
        for (int i = 0; i < kCalls; ++i)
          benchmark::DoNotOptimize(s.all_reduce(&x, &x, 1, 7, 0, s.comm, nullptr));
      });
}
BENCHMARK(BM_InterposedAllReduce);

// An all-to-all as the program writes it: a group of a send and a receive per rank.
void BM_InterposedAllToAllCalls(benchmark::State& state) {
  Setup& s = setup();
  float buf[64] = {};
  compare(
      state, 2 * 64 + 2,
      [&] {
        ncclGroupStart();
        for (int p = 0; p < 64; ++p) {
          ncclSend(buf + p, 1, 7, p, s.comm, nullptr);
          ncclRecv(buf + p, 1, 7, p, s.comm, nullptr);
        }
        ncclGroupEnd();
      },
      [&] {
        s.group_start();
        for (int p = 0; p < 64; ++p) {
          s.send(buf + p, 1, 7, p, s.comm, nullptr);
          s.recv(buf + p, 1, 7, p, s.comm, nullptr);
        }
        s.group_end();
      });
}
BENCHMARK(BM_InterposedAllToAllCalls);

}  // namespace

BENCHMARK_MAIN();
