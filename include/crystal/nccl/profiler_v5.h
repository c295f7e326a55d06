// NCCL profiler plugin ABI, version 5 (NCCL 2.28.x looks up the symbol "ncclProfiler_v5" in
// the library named by NCCL_PROFILER_PLUGIN).
//
// Written from NCCL's documented profiler ABI (src/include/plugin/nccl_profiler.h and
// profiler/profiler_v5.h, read as facts): event type bits, event states and the layout of
// the descriptor, state-argument union and function table. Only layout and values matter.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "crystal/nccl/common.h"

namespace crystal::nccl {

// Event type bits (eActivationMask, descriptor `type`).
enum : std::uint64_t {
  ncclProfileGroup = 1u << 0,
  ncclProfileColl = 1u << 1,
  ncclProfileP2p = 1u << 2,
  ncclProfileProxyOp = 1u << 3,
  ncclProfileProxyStep = 1u << 4,
  ncclProfileProxyCtrl = 1u << 5,
  ncclProfileKernelCh = 1u << 6,
  ncclProfileNetPlugin = 1u << 7,
  ncclProfileGroupApi = 1u << 8,
  ncclProfileCollApi = 1u << 9,
  ncclProfileP2pApi = 1u << 10,
  ncclProfileKernelLaunch = 1u << 11,
};

// ncclProfilerEventState_t (recordEventState). The values are ABI; we act on none of them.
enum ncclProfilerEventState_v5_t : int {
  ncclProfilerProxyOpInProgress_v4 = 19,
  ncclProfilerProxyStepSendGPUWait = 8,
  ncclProfilerProxyStepSendPeerWait_v4 = 20,
  ncclProfilerProxyStepSendWait = 9,
  ncclProfilerProxyStepRecvWait = 10,
  ncclProfilerProxyStepRecvFlushWait = 11,
  ncclProfilerProxyStepRecvGPUWait = 12,
  ncclProfilerProxyCtrlIdle = 13,
  ncclProfilerProxyCtrlActive = 14,
  ncclProfilerProxyCtrlSleep = 15,
  ncclProfilerProxyCtrlWakeup = 16,
  ncclProfilerProxyCtrlAppend = 17,
  ncclProfilerProxyCtrlAppendEnd = 18,
  ncclProfilerNetPluginUpdate = 21,
  ncclProfilerKernelChStop = 22,
  ncclProfilerGroupStartApiStop = 23,
  ncclProfilerGroupEndApiStart = 24,
};

struct ncclProfilerEventDescr_v5_t {
  std::uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      bool graphCaptured;
      int groupDepth;
    } groupApi;
    struct {
      const char* func;
      std::size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graphCaptured;
    } collApi;
    struct {
      const char* func;
      std::size_t count;
      const char* datatype;
      void* stream;
      bool graphCaptured;
    } p2pApi;
    struct {
      void* stream;
    } kernelLaunch;
    struct {
      std::uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      std::size_t count;
      int root;
      const char* datatype;
      std::uint8_t nChannels;
      std::uint8_t nWarps;
      const char* algo;
      const char* proto;
      void* parentGroup;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      std::size_t count;
      int peer;
      std::uint8_t nChannels;
      void* parentGroup;
    } p2p;
    struct {
      pid_t pid;
      std::uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      std::uint8_t channelId;
      std::uint64_t pTimer;
    } kernelCh;
    struct {
      std::int64_t id;
      void* data;
    } netPlugin;
  };
};

union ncclProfilerEventStateArgs_v5_t {
  struct {
    std::size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    std::uint64_t pTimer;
  } kernelCh;
  struct {
    std::uint64_t pTimer;
  } kernelStep;
};

struct ncclProfiler_v5_t {
  const char* name;
  ncclResult_t (*init)(void** context, std::uint64_t commId, int* eActivationMask,
                       const char* commName, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_v5_t eState,
                                   ncclProfilerEventStateArgs_v5_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
};

}  // namespace crystal::nccl
