// proto_check: the real rank of an emulated communicator (others virtual) runs all-reduce,
// all-gather, broadcast from rank 0 and reduce-scatter at every size 8 B .. MAX with NCCL
// choosing protocols freely, and checks the bytes against the data policy (CRYSTAL_DATA):
//   mirror: all-gather chunk j == the real rank's own input (every virtual rank contributed a
//           copy); all-reduce == NRANKS * input (ring; a tree or PAT pairs differently and
//           falls back to zeros: reported, not failed); broadcast == the real rank's own
//           input, also from a virtual root (the interposer keeps it: mirror_broadcast.h).
//   zero:   all-gather other chunks == 0, broadcast == 0 (sums: zeros plus own parts).
//   none:   bytes undefined: only completion is checked.
// Sums (all-reduce, reduce-scatter) are reported, not failed: their expectation holds for a
// ring only. Environment: RANK (default 5), NRANKS (64), CRYSTAL_DATA. Options: --max BYTES,
// --min BYTES (default 8), --ops a,b (default allreduce,allgather,broadcast,reducescatter).
// Prints one line per (op, size): time, and "ok"/"BAD n wrong"; exits 1 if any BAD.
#define CRYSTAL_GPU_PROGRAM "proto_check"
#include "gpu_check.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using gpu_check::envInt;
using gpu_check::now;

// Small integers: sums of up to 8192 copies stay exact in float.
float input(int rank, size_t i) { return static_cast<float>((rank + 1) * 3 + i % 61); }

}  // namespace

int main(int argc, char** argv) {
  const int rank = envInt("RANK", 5), n = envInt("NRANKS", 64);
  const char* pol = std::getenv("CRYSTAL_DATA");
  const std::string policy = pol && *pol ? pol : "mirror";
  size_t max_bytes = size_t{1} << 30, min_bytes = 8;
  std::string only = "allreduce,allgather,broadcast,reducescatter";
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--max") max_bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--min") min_bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--ops") only = argv[++i];
    else {
      std::fprintf(stderr, "proto_check: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  CUDA_OK(cudaSetDevice(0));
  ncclUniqueId id{};
  NCCL_OK(ncclGetUniqueId(&id));  // interposed: the emulation host mints it, whatever the rank
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, n, id, rank));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  // all-gather needs n * chunk: the largest buffer is max_bytes (output side).
  float *send = nullptr, *recv = nullptr;
  CUDA_OK(cudaMalloc(&send, max_bytes));
  CUDA_OK(cudaMalloc(&recv, max_bytes));
  std::vector<float> host(max_bytes / sizeof(float)), got(max_bytes / sizeof(float));
  for (size_t i = 0; i < host.size(); ++i) host[i] = input(rank, i);
  CUDA_OK(cudaMemcpy(send, host.data(), max_bytes, cudaMemcpyHostToDevice));
  int bad_total = 0;
  const char* ops[] = {"allreduce", "allgather", "broadcast", "reducescatter"};
  for (const char* op : ops) {
    if (("," + only + ",").find("," + std::string(op) + ",") == std::string::npos) continue;
    for (size_t bytes = 8; bytes <= max_bytes; bytes *= 2) {
      if (bytes < min_bytes) continue;
      const size_t floats = bytes / sizeof(float);
      if (floats == 0) continue;
      const std::string o = op;
      // all-gather / reduce-scatter: `bytes` is the larger (full) buffer.
      const size_t chunk = floats / n;
      if ((o == "allgather" || o == "reducescatter") && chunk == 0) continue;
      CUDA_OK(cudaMemsetAsync(recv, 0xff, bytes, s));  // NaN pattern: unwritten shows up
      const auto t0 = std::chrono::steady_clock::now();
      if (o == "allreduce") NCCL_OK(ncclAllReduce(send, recv, floats, ncclFloat, ncclSum, comm, s));
      if (o == "allgather") NCCL_OK(ncclAllGather(send, recv, chunk, ncclFloat, comm, s));
      if (o == "broadcast") NCCL_OK(ncclBroadcast(send, recv, floats, ncclFloat, 0, comm, s));
      if (o == "reducescatter")
        NCCL_OK(ncclReduceScatter(send, recv, chunk, ncclFloat, ncclSum, comm, s));
      CUDA_OK(cudaStreamSynchronize(s));
      const double us = std::chrono::duration<double, std::micro>(
                            std::chrono::steady_clock::now() - t0).count();
      const size_t out = o == "allgather" ? chunk * n : o == "reducescatter" ? chunk : floats;
      CUDA_OK(cudaMemcpy(got.data(), recv, out * sizeof(float), cudaMemcpyDeviceToHost));
      size_t wrong = 0, zeros = 0, nonfinite = 0;
      for (size_t i = 0; i < out; ++i) {
        const float g = got[i];
        if (!std::isfinite(g)) ++nonfinite;
        if (g == 0.0f) ++zeros;
        float want = g;
        if (policy == "mirror") {
          if (o == "allreduce") want = n * input(rank, i);
          if (o == "allgather") want = input(rank, i % chunk);
          if (o == "broadcast") want = input(rank, i);
          if (o == "reducescatter") want = n * input(rank, rank * chunk + i);
        } else if (policy == "zero") {
          if (o == "allreduce") want = input(rank, i);
          if (o == "allgather") want = (i / chunk == static_cast<size_t>(rank)) ? input(rank, i % chunk) : 0.0f;
          if (o == "broadcast") want = rank == 0 ? input(rank, i) : 0.0f;
          if (o == "reducescatter") want = input(rank, rank * chunk + i);
        }
        if (g != want) ++wrong;
      }
      // Sums depend on the algorithm's pairing of receives with sends: reported only.
      const bool strict = policy != "none" && (o == "allgather" || o == "broadcast");
      const bool fail = (strict && wrong) || (policy != "none" && nonfinite);
      bad_total += fail;
      std::printf("%s %zu B: %.1f us, %s (%zu of %zu differ from the %s expectation, %zu zero, "
                  "%zu non-finite)\n",
                  op, bytes, us, fail ? "BAD" : "ok", wrong, out, policy.c_str(), zeros, nonfinite);
      std::fflush(stdout);
    }
  }
  NCCL_OK(ncclCommDestroy(comm));
  std::printf("proto_check rank %d of %d, data %s: %s\n", rank, n, policy.c_str(),
              bad_total ? "FAILED" : "all sizes completed");
  return bad_total ? 1 : 0;
}
