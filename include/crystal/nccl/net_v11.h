// ncclNet_v11_t (NCCL 2.28): per-communicator init(ctx, commId), listen/connect take the
// ctx, finalize and setNetAttr added. Member order is ABI.
#pragma once

#include "crystal/nccl/common.h"

namespace crystal::nccl {

struct ncclNetVDeviceProps_v11_t {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
};

struct ncclNetCommConfig_v11_t {
  int trafficClass;  // -1 = undefined
};

struct ncclNetProperties_v11_t {
  char* name;
  char* pciPath;
  std::uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;  // Mbps
  int port;
  float latency;  // us
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  std::size_t maxP2pBytes;
  std::size_t maxCollBytes;
  int maxMultiRequestSize;
};

struct ncclNetCommAttr_v11_t {
  std::int32_t maxConcurrentPeers;
  std::int32_t minConcurrentPeers;
  std::int32_t maxFlowsPerPeer;
  std::int32_t minFlowsPerPeer;
};

struct ncclNetAttr_v11_t {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  std::uint32_t op;
  std::uint32_t algo;
  std::uint32_t proto;
};

struct ncclNet_v11_t {
  const char* name;
  ncclResult_t (*init)(void** ctx, std::uint64_t commId, ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, std::size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, std::size_t size, int type,
                              std::uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, std::size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, std::size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
};

}  // namespace crystal::nccl
