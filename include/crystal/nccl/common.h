// Types shared by every NCCL plugin ABI version we export (NCCL 2.28.9, x86_64).
//
// Written from NCCL's documented plugin ABI (src/include/plugin/*.h of 2.28.9, read as
// facts). Kept in namespace crystal::nccl so that a translation unit may also include the
// real nccl.h without clashes; only the layout and the values matter to NCCL.
#pragma once

#include <cstddef>
#include <cstdint>

namespace crystal::nccl {

// ncclResult_t: the values are ABI.
enum ncclResult_t : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDebugLogLevel : int {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5,
};

// Subsystem flags of the logger (NCCL_DEBUG_SUBSYS); only the ones we log under.
inline constexpr unsigned long kSubsysInit = 0x1;
inline constexpr unsigned long kSubsysNet = 0x10;
inline constexpr unsigned long kSubsysTuning = 0x40;

using ncclDebugLogger_t = void (*)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                   int line, const char* fmt, ...);
using ncclProfilerCallback_t = ncclResult_t (*)(void** eHandle, int type, void* pHandle,
                                                std::int64_t pluginId, void* extData);

// ncclFunc_t (collective kind passed to the tuner).
enum ncclFunc_t : int {
  ncclFuncBroadcast = 0,
  ncclFuncReduce = 1,
  ncclFuncAllGather = 2,
  ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4,
  ncclFuncSendRecv = 5,
  ncclFuncSend = 6,
  ncclFuncRecv = 7,
  ncclFuncAlltoAll = 8,
  ncclFuncScatter = 9,
  ncclFuncGather = 10,
};

enum ncclNetDeviceType : int {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
  NCCL_NET_DEVICE_GIN_PROXY = 2,
  NCCL_NET_DEVICE_GIN_GDAKI = 3,
};

// Same layout for v7..v11 (NCCL typedefs each version to the previous one).
struct ncclNetDeviceHandle_v11_t {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  std::size_t size;
  int needsProxyProgress;
};
using ncclNetDeviceHandle_v10_t = ncclNetDeviceHandle_v11_t;
using ncclNetDeviceHandle_v9_t = ncclNetDeviceHandle_v11_t;
using ncclNetDeviceHandle_v8_t = ncclNetDeviceHandle_v11_t;

inline constexpr std::size_t NCCL_NET_HANDLE_MAXSIZE = 128;
inline constexpr std::size_t NCCL_MAX_NET_SIZE_BYTES = std::size_t{1} << 40;  // 1 TiB
inline constexpr int NCCL_NET_MAX_REQUESTS = 32;  // outstanding requests per comm
inline constexpr int NCCL_NET_MAX_DEVS_PER_NIC = 4;
inline constexpr int NCCL_PTR_HOST = 0x1;
inline constexpr int NCCL_PTR_CUDA = 0x2;
inline constexpr int NCCL_PTR_DMABUF = 0x4;

// Tuner table dimensions (NCCL_NUM_ALGORITHMS / NCCL_NUM_PROTOCOLS of 2.28).
inline constexpr int kTunerNumAlgos = 7;
inline constexpr int kTunerNumProtos = 3;
inline constexpr float kAlgoProtoIgnore = -1.0f;  // NCCL_ALGO_PROTO_IGNORE

}  // namespace crystal::nccl
