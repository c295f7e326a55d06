// The mirror-result kernel (plugin/mirror_kernel.h): dst[i] = op over n copies of src[i], for
// data policy mirror, where every virtual rank of a reduction contributed a copy of the real
// rank's data. n * x for a sum, x^n for a product (max, min and avg need no kernel: a copy).
//
// Arithmetic matches NCCL's types: integers wrap (the product in 64 bits truncated to the
// type is the sum of n wrapping additions, likewise for powers); half, bfloat16 and fp8 are
// computed in float and rounded once (NCCL's ring rounds after every addition, so a float
// result may differ from NCCL's in the last bits; a mirror result has no single "right"
// order anyway).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "mirror_kernel_abi.h"

namespace mk = crystal::plugin::mirror_kernel;

namespace {

template <typename U>
__device__ __forceinline__ U powWrap(U x, unsigned long long n) {
  U r = 1;
  while (n != 0) {
    if (n & 1) r = static_cast<U>(r * x);
    x = static_cast<U>(x * x);
    n >>= 1;
  }
  return r;
}

template <typename F>
__device__ __forceinline__ F powFloat(F x, unsigned long long n) {
  F r = 1;
  while (n != 0) {
    if (n & 1) r *= x;
    x *= x;
    n >>= 1;
  }
  return r;
}

// T: NCCL's element type; U: the unsigned type of its width (integers) or the float type it
// is computed in.
template <typename T, typename U>
__device__ __forceinline__ T integer(T x, int op, unsigned long long n) {
  const U u = static_cast<U>(x);
  return static_cast<T>(op == mk::kScale ? static_cast<U>(u * static_cast<U>(n)) : powWrap<U>(u, n));
}

template <typename F>
__device__ __forceinline__ F real(F x, int op, unsigned long long n) {
  return op == mk::kScale ? x * static_cast<F>(n) : powFloat<F>(x, n);
}

template <typename T, typename Op>
__device__ __forceinline__ void each(void* dst, const void* src, unsigned long long count, Op f) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
    d[i] = f(s[i]);
}

}  // namespace

extern "C" __global__ void crystal_mirror_reduce(void* dst, const void* src,
                                                 unsigned long long count, int type, int op,
                                                 unsigned long long n) {
  switch (type) {
    case mk::kInt8:
      each<signed char>(dst, src, count, [=](signed char x) { return integer<signed char, unsigned char>(x, op, n); });
      break;
    case mk::kUint8:
      each<unsigned char>(dst, src, count, [=](unsigned char x) { return integer<unsigned char, unsigned char>(x, op, n); });
      break;
    case mk::kInt32:
      each<int>(dst, src, count, [=](int x) { return integer<int, unsigned>(x, op, n); });
      break;
    case mk::kUint32:
      each<unsigned>(dst, src, count, [=](unsigned x) { return integer<unsigned, unsigned>(x, op, n); });
      break;
    case mk::kInt64:
      each<long long>(dst, src, count, [=](long long x) { return integer<long long, unsigned long long>(x, op, n); });
      break;
    case mk::kUint64:
      each<unsigned long long>(dst, src, count, [=](unsigned long long x) {
        return integer<unsigned long long, unsigned long long>(x, op, n);
      });
      break;
    case mk::kFloat16:
      each<__half>(dst, src, count, [=](__half x) { return __float2half_rn(real(__half2float(x), op, n)); });
      break;
    case mk::kFloat32:
      each<float>(dst, src, count, [=](float x) { return real(x, op, n); });
      break;
    case mk::kFloat64:
      each<double>(dst, src, count, [=](double x) { return real(x, op, n); });
      break;
    case mk::kBfloat16:
      each<__nv_bfloat16>(dst, src, count, [=](__nv_bfloat16 x) {
        return __float2bfloat16_rn(real(__bfloat162float(x), op, n));
      });
      break;
    case mk::kFloat8e4m3:
      each<__nv_fp8_e4m3>(dst, src, count, [=](__nv_fp8_e4m3 x) {
        return __nv_fp8_e4m3(real(static_cast<float>(x), op, n));
      });
      break;
    case mk::kFloat8e5m2:
      each<__nv_fp8_e5m2>(dst, src, count, [=](__nv_fp8_e5m2 x) {
        return __nv_fp8_e5m2(real(static_cast<float>(x), op, n));
      });
      break;
    default:
      break;  // the host never launches an unknown type
  }
}
