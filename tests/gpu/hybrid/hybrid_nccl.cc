// hybrid_nccl: a small NCCL program run as the real rank(s) of an emulated communicator
// (tests/gpu/hybrid/run_device.sh). MPI-free:
//   RANK          this process's rank in the communicator
//   NRANKS        communicator size (default 64)
//   ID_ROOT=1     this process calls ncclGetUniqueId (interposed: the host mints it) and
//                 writes the id to ID_FILE; the others wait for the file
//   ID_FILE       default /tmp/hybrid_nccl.id
//   REAL_PEER     rank of another real process: send/recv with it carries a verified pattern
// Options: --ops a,b,..  (allreduce,allgather,reducescatter,broadcast,reduce,sendrecv,alltoall)
//          --min BYTES --max BYTES --step F (size multiplier) --iters N --split G (also
//          run on ncclCommSplit(color = rank / G) alternately with the world)
//          --init-only 1 (create the communicators, destroy them, exit)
//          --warmup N (default 2): untimed operations before each measurement; as many as
//          --iters pays the process's first-use costs before the clock starts (with 2, a
//          400-iteration loop's first ~40 ms stalled: tests/gpu/hybrid/README.md)
//          --op-times 1: a CUDA event after every timed operation, and a "#" line per row with
//          the spread of the operations' times (op_times.h: min, median, max, the slowest
//          three by index in the loop and the mean without them), to tell a few slow
//          operations from a uniformly slower loop, and a line of the same for each call's
//          host time; each event costs the host ~1-2 us a call and the GPU ~2 us an operation
//          between NCCL's kernels (tests/gpu/hybrid/README.md, fortieth session)
//          --wait-spin 1: wait for the GPU before each timed loop by polling without sleeping
//          (default 0: a 50 us sleep between polls), --faults 0: leave out the minor-fault
//          count (it reads /proc for every thread just before the clock starts): both for
//          telling the program's own first call after a wait from the emulation's share
// Prints one line per (comm, op, size): avg microseconds over --iters after the warm-ups,
// host_us: the CPU's time per operation to enqueue them (NCCL's calls; when it is near avg_us
// the GPU waited for the host, as a real cluster's would for the same calls), and
// after_first_us: the mean of the operations after the first (one CUDA event after the first
// marks it; -1 with --iters 1). The first runs after the program waited for its stream, so it
// carries the program's own first call with the GPU idle (100-160 us of NCCL's host time where
// the rest took 13-25, an H100 VM, tests/gpu/hybrid/README.md, forty-first session), which
// `crystal simulate --sweep` does not time; its JSON's time_after_first is the model's figure
// for the rest. Then a "#" line
// with the process's minor faults in the timed loop by thread (first touches of fresh memory,
// e.g. NCCL growing a pool as the loop runs ahead; a long enough warm-up should leave few).
// Never hangs: it waits for the GPU by polling, checks every communicator's async error
// (an NCCL error from the plugin, e.g. the emulation host gone) and gives up after
// WAIT_TIMEOUT seconds (default 120) per measurement; then it aborts the communicators and
// exits 6 (NCCL error) or 7 (timeout) with one line saying why.
// A watchdog thread checks the async errors too (every millisecond, as PyTorch's NCCL
// watchdog does): with many iterations in flight the main thread blocks inside an enqueue
// once CUDA's launch queue is full, and only another thread can see the error and abort.
#define CRYSTAL_GPU_PROGRAM "hybrid_nccl"
#include "gpu_check.h"
#include "op_times.h"
#include "thread_faults.h"
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <thread>
#include <vector>

namespace {

using gpu_check::envInt;
using gpu_check::now;

ncclUniqueId shareId(int rank, const std::string& file) {
  ncclUniqueId id{};
  if (envInt("ID_ROOT", rank == 0 ? 1 : 0) == 1) {
    NCCL_OK(ncclGetUniqueId(&id));
    const std::string tmp = file + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    std::fwrite(&id, sizeof id, 1, f);
    std::fclose(f);
    std::rename(tmp.c_str(), file.c_str());  // atomic: readers never see half an id
    return id;
  }
  for (int i = 0; i < 6000; ++i) {
    if (FILE* f = std::fopen(file.c_str(), "rb")) {
      const size_t n = std::fread(&id, sizeof id, 1, f);
      std::fclose(f);
      if (n == 1) return id;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "hybrid_nccl: rank %d: no id in %s after 60 s\n", rank, file.c_str());
  std::exit(5);
}

struct Buffers {
  void* send = nullptr;
  void* recv = nullptr;
  size_t bytes = 0;
};

// One collective of `bytes` (the larger of send/recv) on `comm`.
// Seconds the all-to-alls spent in ncclGroupEnd (NCCL's enqueue of the grouped sends and
// receives), for the share of host_us it takes.
double g_group_end_s = 0;

void runOp(const std::string& op, ncclComm_t comm, int /*rank*/, int n, const Buffers& b,
           size_t bytes, int peer, int from, cudaStream_t s) {
  const size_t floats = bytes / sizeof(float);
  if (op == "allreduce") {
    NCCL_OK(ncclAllReduce(b.send, b.recv, floats, ncclFloat, ncclSum, comm, s));
  } else if (op == "allgather") {
    NCCL_OK(ncclAllGather(b.send, b.recv, floats / n, ncclFloat, comm, s));
  } else if (op == "reducescatter") {
    NCCL_OK(ncclReduceScatter(b.send, b.recv, floats / n, ncclFloat, ncclSum, comm, s));
  } else if (op == "broadcast") {
    NCCL_OK(ncclBroadcast(b.send, b.recv, floats, ncclFloat, 0, comm, s));
  } else if (op == "reduce") {  // to rank 0: a chain from rank 1 through the ring to it
    NCCL_OK(ncclReduce(b.send, b.recv, floats, ncclFloat, ncclSum, 0, comm, s));
  } else if (op == "sendrecv") {
    // Send to `peer`, receive from `from` (the rank whose `peer` we are).
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(b.send, floats, ncclFloat, peer, comm, s));
    NCCL_OK(ncclRecv(b.recv, floats, ncclFloat, from, comm, s));
    NCCL_OK(ncclGroupEnd());
  } else if (op == "alltoall") {
    const size_t per = floats / n;
    NCCL_OK(ncclGroupStart());
    for (int p = 0; p < n; ++p) {
      NCCL_OK(ncclSend(static_cast<float*>(b.send) + p * per, per, ncclFloat, p, comm, s));
      NCCL_OK(ncclRecv(static_cast<float*>(b.recv) + p * per, per, ncclFloat, p, comm, s));
    }
    const double t0 = now();
    NCCL_OK(ncclGroupEnd());
    g_group_end_s += now() - t0;
  } else {
    std::fprintf(stderr, "hybrid_nccl: unknown op '%s'\n", op.c_str());
    std::exit(2);
  }
}

// Real<->real bytes: send a rank-stamped pattern to the other real process and check what
// comes back from it.
bool verifyRealPeer(ncclComm_t comm, int rank, int peer, cudaStream_t s) {
  const size_t count = 1 << 20;
  std::vector<float> out(count), in(count);
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(rank * 1000003 + i % 4093);
  float *dsend = nullptr, *drecv = nullptr;
  CUDA_OK(cudaMalloc(&dsend, count * sizeof(float)));
  CUDA_OK(cudaMalloc(&drecv, count * sizeof(float)));
  CUDA_OK(cudaMemcpy(dsend, out.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(dsend, count, ncclFloat, peer, comm, s));
  NCCL_OK(ncclRecv(drecv, count, ncclFloat, peer, comm, s));
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaMemcpy(in.data(), drecv, count * sizeof(float), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i)
    if (in[i] != static_cast<float>(peer * 1000003 + i % 4093)) ++bad;
  std::printf("verify rank %d <-> real rank %d: %zu of %zu floats wrong\n", rank, peer, bad, count);
  std::fflush(stdout);
  CUDA_OK(cudaFree(dsend));
  CUDA_OK(cudaFree(drecv));
  return bad == 0;
}

// Owns the end of the run on failure: polls every communicator's async error from its own
// thread; on an error it prints one line and ends the process with 6, whatever the main
// thread is blocked in (with many iterations queued it sits inside an enqueue, waiting for
// CUDA's full launch queue). It does not call ncclCommAbort then: aborting while the main
// thread is inside ncclAllReduce on the same communicator crashed NCCL on the H200
// (SIGSEGV, 2026-12-03 kill case); process exit releases the GPU and the connections. A
// timeout seen by the main thread (not inside NCCL) aborts the communicators first (exit 7).
class Watchdog {
 public:
  Watchdog(const std::vector<std::pair<std::string, ncclComm_t>>& comms, int rank)
      : comms_(comms), rank_(rank), t0_(now()), thread_([this] { loop(); }) {}
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }
  [[noreturn]] void abortAndExit(int code) {
    std::lock_guard lock(abort_mu_);  // one end, from whichever thread comes first
    for (const auto& c : comms_) ncclCommAbort(c.second);
    std::printf("hybrid_nccl: rank %d: communicators aborted, exiting %d\n", rank_, code);
    std::fflush(stdout);
    std::_Exit(code);
  }

 private:
  void loop() {
    while (!stop_) {
      for (const auto& [name, comm] : comms_) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) continue;
        if (async == ncclSuccess || async == ncclInProgress) continue;
        std::printf("hybrid_nccl: rank %d: NCCL error on comm %s after %.3f s: %s (%d): %s\n",
                    rank_, name.c_str(), now() - t0_, ncclGetErrorString(async),
                    static_cast<int>(async), ncclGetLastError(comm));
        std::fflush(stdout);
        std::lock_guard lock(abort_mu_);
        std::_Exit(6);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  const std::vector<std::pair<std::string, ncclComm_t>> comms_;
  const int rank_;
  const double t0_;
  std::mutex abort_mu_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Waits for `ev` like cudaEventSynchronize, by polling; NCCL errors are the watchdog's, a
// wait longer than `timeout_s` ends the run through it (exit 7).
int waitOrFail(cudaEvent_t ev, Watchdog& watchdog, int rank, double timeout_s,
               bool spin = false) {
  const double t0 = now();
  for (;;) {
    const cudaError_t q = cudaEventQuery(ev);
    if (q == cudaSuccess) return 0;
    if (q != cudaErrorNotReady) {
      std::printf("hybrid_nccl: rank %d: CUDA error while waiting: %s\n", rank,
                  cudaGetErrorString(q));
      std::fflush(stdout);
      return 3;
    }
    if (now() - t0 > timeout_s) {
      std::printf("hybrid_nccl: rank %d: no completion after %.0f s (hang); aborting\n", rank,
                  timeout_s);
      std::fflush(stdout);
      watchdog.abortAndExit(7);
    }
    if (!spin) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t c = s.find(',', pos);
    out.push_back(s.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  gpu_check::installCrashReport();
  std::string ops = "allreduce,allgather,reducescatter,broadcast,sendrecv,alltoall";
  size_t min_b = 1024, max_b = size_t{1} << 30;
  double step = 4;
  int iters = 20, split = 0, init_only = 0, warmup = 2, op_times = 0, wait_spin = 0, faults = 1;
  // The integer options, by name.
  const std::pair<const char*, int*> int_options[] = {
      {"--iters", &iters},       {"--split", &split},         {"--init-only", &init_only},
      {"--warmup", &warmup},     {"--op-times", &op_times},   {"--wait-spin", &wait_spin},
      {"--faults", &faults}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    int* int_option = nullptr;
    for (const auto& [name, field] : int_options)
      if (a == name) int_option = field;
    if (int_option != nullptr)
      *int_option = std::atoi(v.c_str());
    else if (a == "--ops")
      ops = v;
    else if (a == "--min")
      min_b = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--max")
      max_b = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--step")
      step = std::atof(v.c_str());
    else {
      std::fprintf(stderr, "hybrid_nccl: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const int rank = envInt("RANK", 0), n = envInt("NRANKS", 64);
  const int real_peer = envInt("REAL_PEER", -1);
  const double wait_s = envInt("WAIT_TIMEOUT", 120);
  const char* idf = std::getenv("ID_FILE");
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  std::printf("hybrid_nccl: rank %d of %d, NCCL %d, NCCL_HOSTID=%s\n", rank, n, version,
              std::getenv("NCCL_HOSTID") ? std::getenv("NCCL_HOSTID") : "(unset)");
  CUDA_OK(cudaSetDevice(0));
  const ncclUniqueId id = shareId(rank, idf ? idf : "/tmp/hybrid_nccl.id");

  double t0 = now();
  ncclComm_t world = nullptr;
  NCCL_OK(ncclCommInitRank(&world, n, id, rank));
  std::printf("init world: %.3f s\n", now() - t0);
  std::fflush(stdout);
  std::vector<std::pair<std::string, ncclComm_t>> comms{{"world", world}};
  if (split > 0) {
    t0 = now();
    ncclComm_t sub = nullptr;
    NCCL_OK(ncclCommSplit(world, rank / split, rank, &sub, nullptr));
    std::printf("init split(color=rank/%d): %.3f s\n", split, now() - t0);
    comms.push_back({"split", sub});
  }
  std::fflush(stdout);
  if (init_only != 0) {
    t0 = now();
    for (auto& [name, comm] : comms) NCCL_OK(ncclCommDestroy(comm));
    std::printf("destroy: %.3f s\nhybrid_nccl: rank %d done (init only)\n", now() - t0, rank);
    return 0;
  }
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  auto watchdog = std::make_unique<Watchdog>(comms, rank);
  Buffers b;
  b.bytes = max_b;
  CUDA_OK(cudaMalloc(&b.send, max_b));
  CUDA_OK(cudaMalloc(&b.recv, max_b));
  CUDA_OK(cudaMemset(b.send, 0, max_b));
  bool ok = true;
  if (real_peer >= 0) ok = verifyRealPeer(world, rank, real_peer, s);

  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  std::vector<cudaEvent_t> op_end(op_times != 0 ? static_cast<size_t>(iters) : 0);
  for (cudaEvent_t& e : op_end) CUDA_OK(cudaEventCreate(&e));
  cudaEvent_t e_first;  // after the first timed operation
  CUDA_OK(cudaEventCreate(&e_first));
  std::printf("%-6s %-14s %12s %12s %10s %9s %14s\n", "comm", "op", "bytes", "avg_us",
              "algbw_GBps", "host_us", "after_first_us");
  std::fflush(stdout);
  for (const std::string& op : splitList(ops)) {
    for (double sz = static_cast<double>(min_b); sz <= static_cast<double>(max_b) * 1.0001;
         sz *= step) {
      // Alternate the communicators at every size: both stay in use.
      for (const auto& [name, comm] : comms) {
        int cn = 0, cr = 0;
        NCCL_OK(ncclCommCount(comm, &cn));
        NCCL_OK(ncclCommUserRank(comm, &cr));
        const size_t bytes = static_cast<size_t>(sz) / (sizeof(float) * cn) * sizeof(float) * cn;
        if (bytes == 0) continue;
        // With a real peer: a pairwise exchange between the two real ranks (real bytes both
        // ways); otherwise a ring shift, which on rank r talks to virtual r+1 and r-1.
        const bool pair = real_peer >= 0 && name == "world";
        const int peer = pair ? real_peer : (cr + 1) % cn;
        const int from = pair ? real_peer : (cr - 1 + cn) % cn;
        for (int w = 0; w < warmup; ++w) runOp(op, comm, cr, cn, b, bytes, peer, from, s);
        // The warm-ups end before the clock starts (as nccl-tests does): else e0 runs when
        // they end, after the host has enqueued some measured iterations, and a host-bound
        // operation reads faster than its calls allow.
        CUDA_OK(cudaEventRecord(e0, s));
        if (const int rc = waitOrFail(e0, *watchdog, rank, wait_s, wait_spin != 0); rc != 0)
          return rc;
        const auto faults0 = faults != 0 ? gpu_check::minorFaultsByThread()  // outside the clock
                                         : decltype(gpu_check::minorFaultsByThread()){};
        CUDA_OK(cudaEventRecord(e0, s));
        const double h0 = now();
        g_group_end_s = 0;
        std::vector<double> call_us;  // --op-times: each call's host time (its enqueue)
        for (int it = 0; it < iters; ++it) {
          const double c0 = op_end.empty() ? 0 : now();
          runOp(op, comm, cr, cn, b, bytes, peer, from, s);
          if (!op_end.empty()) {
            call_us.push_back(1e6 * (now() - c0));
            CUDA_OK(cudaEventRecord(op_end[static_cast<size_t>(it)], s));
          } else if (it == 0) {
            CUDA_OK(cudaEventRecord(e_first, s));
          }
        }
        const double host_us = 1e6 * (now() - h0) / iters;
        const double group_end_us = 1e6 * g_group_end_s / iters;
        CUDA_OK(cudaEventRecord(e1, s));
        if (const int rc = waitOrFail(e1, *watchdog, rank, wait_s); rc != 0) return rc;
        float ms = 0;
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        const double us = 1000.0 * ms / iters;
        double after_first_us = -1;
        if (iters >= 2) {
          float rest_ms = 0;
          CUDA_OK(cudaEventElapsedTime(&rest_ms, op_end.empty() ? e_first : op_end[0], e1));
          after_first_us = 1000.0 * rest_ms / (iters - 1);
        }
        std::printf("%-6s %-14s %12zu %12.1f %10.2f %9.1f %14.1f\n", name.c_str(), op.c_str(), bytes,
                    us, bytes / us / 1000.0, host_us, after_first_us);
        if (op == "alltoall") std::printf("#   of host_us in ncclGroupEnd: %.1f\n", group_end_us);
        if (!op_end.empty()) {
          std::vector<double> each;
          cudaEvent_t prev = e0;
          for (cudaEvent_t e : op_end) {
            float op_ms = 0;
            CUDA_OK(cudaEventElapsedTime(&op_ms, prev, e));
            each.push_back(1000.0 * op_ms);
            prev = e;
          }
          std::printf("#   per operation (us): %s\n", gpu_check::formatOpTimes(each).c_str());
          // The first call after the warm-ups' wait runs while the GPU is idle: its host time
          // is part of the first operation's.
          std::printf("#   host time a call (us): %s\n", gpu_check::formatOpTimes(call_us).c_str());
        }
        if (faults != 0)
          std::printf("#   minor faults in the timed loop: %s\n",
                      gpu_check::faultsBetween(faults0, gpu_check::minorFaultsByThread()).c_str());
        std::fflush(stdout);
      }
    }
  }
  watchdog.reset();  // before the communicators go away
  for (auto& [name, comm] : comms) NCCL_OK(ncclCommDestroy(comm));
  std::printf("hybrid_nccl: rank %d done (%s)\n", rank, ok ? "ok" : "VERIFY FAILED");
  return ok ? 0 : 1;
}
