// What the host and the mirror-result kernel (mirror_kernel.cu) agree on: its name, its
// operations and NCCL 2.28's ncclDataType_t values. Included by nvcc and the C++ compiler.
#pragma once

namespace crystal::plugin::mirror_kernel {

// extern "C" __global__ void crystal_mirror_reduce(void* dst, const void* src,
//     unsigned long long count, int type, int op, unsigned long long n);
inline constexpr const char* kName = "crystal_mirror_reduce";

inline constexpr int kScale = 0;  // dst = n * src (sum of n copies)
inline constexpr int kPower = 1;  // dst = src^n (product of n copies)

// ncclDataType_t (nccl.h of 2.28).
inline constexpr int kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5,
                     kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9,
                     kFloat8e4m3 = 10, kFloat8e5m2 = 11;

inline constexpr unsigned kThreads = 256;
inline constexpr unsigned kMaxBlocks = 2048;  // grid-stride beyond (16 per SM on an H200)

}  // namespace crystal::plugin::mirror_kernel
