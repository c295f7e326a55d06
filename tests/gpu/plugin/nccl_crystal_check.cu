// Two real ranks (one process each, distinct NCCL_HOSTID, one GPU) run all-reduce,
// all-gather, reduce-scatter and send/recv through NCCL over libnccl-net-crystal.so.
// Results are compared bit-exactly with a CPU reference; each size's time is printed beside
// the target model's prediction for two ranks on two nodes.
// Usage: nccl_crystal_check RANK UNIQUE_ID_FILE MAX_BYTES
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "model_prediction.h"

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::fprintf(stderr, "CUDA %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); std::exit(3); } } while (0)
#define CHECK_NCCL(x) do { ncclResult_t r = (x); if (r != ncclSuccess) { \
  std::fprintf(stderr, "NCCL %s at %s:%d\n", ncclGetErrorString(r), __FILE__, __LINE__); std::exit(4); } } while (0)

namespace {

// Exactly representable values: sums of two are exact in float, so any order is bit-exact.
float value(std::size_t i, int rank) { return static_cast<float>((i * 7 + rank * 3) % 1024) * 0.25f; }

enum Op { AllReduce, AllGather, ReduceScatter, SendRecv };
const char* kName[] = {"all_reduce", "all_gather", "reduce_scatter", "send_recv"};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) { std::fprintf(stderr, "usage: %s RANK ID_FILE MAX_BYTES\n", argv[0]); return 2; }
  const int rank = std::atoi(argv[1]);
  const std::string id_file = argv[2];
  const std::size_t max_bytes = std::strtoull(argv[3], nullptr, 10);
  const int nranks = 2, peer = 1 - rank;
  CHECK_CUDA(cudaSetDevice(0));
  ncclUniqueId id;
  if (rank == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    std::ofstream(id_file + ".tmp", std::ios::binary).write(id.internal, sizeof id.internal);
    std::rename((id_file + ".tmp").c_str(), id_file.c_str());
  } else {
    for (;;) {
      std::ifstream f(id_file, std::ios::binary);
      if (f && f.read(id.internal, sizeof id.internal)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));

  // Buffers for the largest size: send = max_bytes, recv = nranks * max_bytes.
  const std::size_t max_elems = max_bytes / sizeof(float);
  float *dsend = nullptr, *drecv = nullptr;
  CHECK_CUDA(cudaMalloc(&dsend, max_bytes));
  CHECK_CUDA(cudaMalloc(&drecv, nranks * max_bytes));
  std::vector<float> host(max_elems), out(nranks * max_elems), ref;
  for (std::size_t i = 0; i < max_elems; ++i) host[i] = value(i, rank);
  CHECK_CUDA(cudaMemcpy(dsend, host.data(), max_bytes, cudaMemcpyHostToDevice));

  int failures = 0;
  if (rank == 0)
    std::printf("%-15s %12s %12s %12s %10s  %s\n", "op", "bytes", "measured_us", "model_us",
                "model_algo", "check");
  for (int op = AllReduce; op <= SendRecv; ++op) {
    for (std::size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
      const std::size_t n = bytes / sizeof(float);
      auto run = [&] {
        switch (op) {
          case AllReduce: CHECK_NCCL(ncclAllReduce(dsend, drecv, n, ncclFloat, ncclSum, comm, s)); break;
          case AllGather: CHECK_NCCL(ncclAllGather(dsend, drecv, n, ncclFloat, comm, s)); break;
          case ReduceScatter:
            CHECK_NCCL(ncclReduceScatter(dsend, drecv, n / nranks, ncclFloat, ncclSum, comm, s));
            break;
          case SendRecv:
            CHECK_NCCL(ncclGroupStart());
            CHECK_NCCL(ncclSend(dsend, n, ncclFloat, peer, comm, s));
            CHECK_NCCL(ncclRecv(drecv, n, ncclFloat, peer, comm, s));
            CHECK_NCCL(ncclGroupEnd());
            break;
        }
      };
      run();  // warm-up (connections, registration)
      CHECK_CUDA(cudaStreamSynchronize(s));
      const int iters = bytes <= (64u << 20) ? 5 : 1;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) run();
      CHECK_CUDA(cudaStreamSynchronize(s));
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
      // Bit-exact check against the CPU reference.
      std::size_t out_elems = op == AllGather ? n * nranks : op == ReduceScatter ? n / nranks : n;
      CHECK_CUDA(cudaMemcpy(out.data(), drecv, out_elems * sizeof(float), cudaMemcpyDeviceToHost));
      ref.assign(out_elems, 0.0f);
      for (std::size_t i = 0; i < out_elems; ++i) {
        switch (op) {
          case AllReduce: ref[i] = value(i, 0) + value(i, 1); break;
          case AllGather: ref[i] = value(i % n, static_cast<int>(i / n)); break;
          case ReduceScatter: {
            const std::size_t g = rank * (n / nranks) + i;
            ref[i] = value(g, 0) + value(g, 1);
            break;
          }
          case SendRecv: ref[i] = value(i, peer); break;
        }
      }
      const bool ok = std::memcmp(out.data(), ref.data(), out_elems * sizeof(float)) == 0;
      failures += !ok;
      std::string algo;
      const double model_us = modelTimeUs(op, bytes, algo);
      if (rank == 0)
        std::printf("%-15s %12zu %12.1f %12.1f %10s  %s\n", kName[op], bytes, us, model_us,
                    algo.c_str(), ok ? "bit-exact" : "MISMATCH");
      std::fflush(stdout);
    }
  }
  CHECK_CUDA(cudaFree(dsend));
  CHECK_CUDA(cudaFree(drecv));
  CHECK_NCCL(ncclCommDestroy(comm));
  std::printf("rank %d: %s\n", rank, failures ? "FAILED" : "all results bit-exact");
  return failures ? 1 : 0;
}
