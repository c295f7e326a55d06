// proto_check: the real rank of an emulated communicator (others virtual) runs all-reduce,
// all-gather, broadcast from rank 0 and reduce-scatter at every size 8 B .. MAX with NCCL
// choosing protocols freely, and checks the bytes against the data policy (CRYSTAL_DATA):
//   mirror: all-gather chunk j == the real rank's own input (every virtual rank contributed a
//           copy); all-reduce == NRANKS * input and reduce-scatter == NRANKS * own block
//           (the interposer writes them, plugin/mirror_result.h; with
//           CRYSTAL_MIRROR_RESULTS=0 they are what the data path gave: reported, not failed);
//           broadcast == the real rank's own input, also from a virtual root.
//   zero:   all-gather other chunks == 0, broadcast == 0 (sums: zeros plus own parts).
//   none:   bytes undefined: only completion is checked.
// Environment: RANK (default 5), NRANKS (64), CRYSTAL_DATA. Options: --max BYTES,
// --min BYTES (default 8), --ops a,b (default allreduce,allgather,broadcast,reducescatter;
// `types`: under mirror, every NCCL type and reduction, see checkTypes).
// Prints one line per (op, size): time, and "ok"/"BAD n wrong"; exits 1 if any BAD.
#define CRYSTAL_GPU_PROGRAM "proto_check"
#include "gpu_check.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

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

// One element of NCCL type `t` from / to a double (host conversions of CUDA's headers).
void encode(ncclDataType_t t, double v, unsigned char* out) {
  switch (t) {
    case ncclInt8: { const auto x = static_cast<int8_t>(static_cast<int64_t>(v)); std::memcpy(out, &x, 1); break; }
    case ncclUint8: { const auto x = static_cast<uint8_t>(static_cast<int64_t>(v)); std::memcpy(out, &x, 1); break; }
    case ncclInt32: { const auto x = static_cast<int32_t>(static_cast<int64_t>(v)); std::memcpy(out, &x, 4); break; }
    case ncclUint32: { const auto x = static_cast<uint32_t>(static_cast<int64_t>(v)); std::memcpy(out, &x, 4); break; }
    case ncclInt64: { const auto x = static_cast<int64_t>(v); std::memcpy(out, &x, 8); break; }
    case ncclUint64: { const auto x = static_cast<uint64_t>(static_cast<int64_t>(v)); std::memcpy(out, &x, 8); break; }
    case ncclFloat16: { const __half x = __float2half_rn(static_cast<float>(v)); std::memcpy(out, &x, 2); break; }
    case ncclFloat32: { const auto x = static_cast<float>(v); std::memcpy(out, &x, 4); break; }
    case ncclFloat64: std::memcpy(out, &v, 8); break;
    case ncclBfloat16: { const __nv_bfloat16 x = __float2bfloat16_rn(static_cast<float>(v)); std::memcpy(out, &x, 2); break; }
    case ncclFloat8e4m3: { const __nv_fp8_e4m3 x(static_cast<float>(v)); std::memcpy(out, &x, 1); break; }
    case ncclFloat8e5m2: { const __nv_fp8_e5m2 x(static_cast<float>(v)); std::memcpy(out, &x, 1); break; }
    default: break;
  }
}

size_t typeBytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

bool isInteger(ncclDataType_t t) { return t <= ncclUint64; }

// Under mirror, every type and reduction NCCL 2.28 has, as an in-place all-reduce of 4096
// elements (the interposer's rewrite, plugin/mirror_kernel.cu): sum == n * x (integers wrap),
// prod == x^n, max/min/avg == x, compared byte for byte with the host's encoding. Inputs keep
// every expectation exact in every type (n * 3 <= 3 * 8192 needs no rounding in fp8 only for
// n <= 64: e4m3 192 and e5m2 192 are exact). Returns the number of (type, op) pairs wrong.
int checkTypes(ncclComm_t comm, cudaStream_t s, int n) {
  const ncclDataType_t types[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                  ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                  ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
  const char* type_names[] = {"int8",   "uint8", "int32",    "uint32",  "int64",    "uint64",
                              "half",   "float", "double",   "bf16",    "fp8e4m3", "fp8e5m2"};
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  const char* op_names[] = {"sum", "prod", "max", "min", "avg"};
  constexpr size_t kCount = 4096;
  void* buf = nullptr;
  CUDA_OK(cudaMalloc(&buf, kCount * 8));
  int bad = 0;
  for (size_t ti = 0; ti < std::size(types); ++ti) {
    const ncclDataType_t t = types[ti];
    const size_t b = typeBytes(t);
    for (size_t oi = 0; oi < std::size(ops); ++oi) {
      const ncclRedOp_t op = ops[oi];
      std::vector<unsigned char> in(kCount * b), want(kCount * b), got(kCount * b);
      for (size_t i = 0; i < kCount; ++i) {
        // prod: 1 and 2 for integers (2^n wraps to 0 for n >= 64 in every width), 1 and -1
        // for floats (even n: 1); otherwise 1, 2, 3.
        double x = op == ncclProd ? (isInteger(t) ? 1.0 + i % 2 : (i % 2 ? -1.0 : 1.0))
                                  : 1.0 + static_cast<double>(i % 3);
        double w = x;
        if (op == ncclSum) w = x * n;
        if (op == ncclProd) {
          if (isInteger(t)) {
            uint64_t r = 1;
            for (int k = 0; k < n; ++k) r *= static_cast<uint64_t>(x);
            w = static_cast<double>(r);  // 1, or 2^n mod 2^64: 0 from n = 64 on
          } else {
            w = std::pow(x, n);
          }
        }
        encode(t, x, &in[i * b]);
        if (isInteger(t) && op == ncclSum) {
          const uint64_t r = static_cast<uint64_t>(x) * static_cast<uint64_t>(n);
          std::memcpy(&want[i * b], &r, b);  // little-endian truncation: the wrapped sum
        } else {
          encode(t, w, &want[i * b]);
        }
      }
      CUDA_OK(cudaMemcpy(buf, in.data(), in.size(), cudaMemcpyHostToDevice));
      NCCL_OK(ncclAllReduce(buf, buf, kCount, t, op, comm, s));
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaMemcpy(got.data(), buf, got.size(), cudaMemcpyDeviceToHost));
      size_t wrong = 0;
      for (size_t i = 0; i < kCount; ++i) wrong += std::memcmp(&got[i * b], &want[i * b], b) != 0;
      std::printf("types %s %s: %s (%zu of %zu differ)\n", type_names[ti], op_names[oi],
                  wrong ? "BAD" : "ok", wrong, kCount);
      bad += wrong != 0;
    }
  }
  CUDA_OK(cudaFree(buf));
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = envInt("RANK", 5), n = envInt("NRANKS", 64);
  const char* pol = std::getenv("CRYSTAL_DATA");
  const std::string policy = pol && *pol ? pol : "mirror";
  const bool mirror_results = envInt("CRYSTAL_MIRROR_RESULTS", 1) != 0;
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
      // Sums are exact only where the interposer writes them (mirror, results on); under zero
      // they depend on the algorithm (a tree and a ring pair differently): reported only.
      const bool sum = o == "allreduce" || o == "reducescatter";
      const bool strict = policy != "none" && (!sum || (policy == "mirror" && mirror_results));
      const bool fail = (strict && wrong) || (policy != "none" && nonfinite);
      bad_total += fail;
      std::printf("%s %zu B: %.1f us, %s (%zu of %zu differ from the %s expectation, %zu zero, "
                  "%zu non-finite)\n",
                  op, bytes, us, fail ? "BAD" : "ok", wrong, out, policy.c_str(), zeros, nonfinite);
      std::fflush(stdout);
    }
  }
  if (("," + only + ",").find(",types,") != std::string::npos && policy == "mirror" &&
      mirror_results)
    bad_total += checkTypes(comm, s, n);
  NCCL_OK(ncclCommDestroy(comm));
  std::printf("proto_check rank %d of %d, data %s: %s\n", rank, n, policy.c_str(),
              bad_total ? "FAILED" : "all sizes completed");
  return bad_total ? 1 : 0;
}
