// The one implementation of the net plugin (ABI v11 semantics). Every function is noexcept
// and returns an NCCL code; exports.cc wires it (and the v8..v10 shims) into NCCL's tables.
#pragma once

#include <cstddef>
#include <cstdint>

#include "crystal/nccl/net_v11.h"

namespace crystal::plugin::net {

using nccl::ncclResult_t;

ncclResult_t init(void** ctx, std::uint64_t commId, nccl::ncclNetCommConfig_v11_t* config,
                  nccl::ncclDebugLogger_t logger, nccl::ncclProfilerCallback_t prof) noexcept;
ncclResult_t devices(int* ndev) noexcept;
ncclResult_t getProperties(int dev, nccl::ncclNetProperties_v11_t* props) noexcept;
ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) noexcept;
ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm,
                     nccl::ncclNetDeviceHandle_v11_t** sendDevComm) noexcept;
ncclResult_t accept(void* listenComm, void** recvComm,
                    nccl::ncclNetDeviceHandle_v11_t** recvDevComm) noexcept;
ncclResult_t regMr(void* comm, void* data, std::size_t size, int type, void** mhandle) noexcept;
ncclResult_t regMrDmaBuf(void* comm, void* data, std::size_t size, int type, std::uint64_t offset,
                         int fd, void** mhandle) noexcept;
ncclResult_t deregMr(void* comm, void* mhandle) noexcept;
ncclResult_t isend(void* sendComm, void* data, std::size_t size, int tag, void* mhandle,
                   void* phandle, void** request) noexcept;
ncclResult_t irecv(void* recvComm, int n, void** data, std::size_t* sizes, int* tags,
                   void** mhandles, void** phandles, void** request) noexcept;
ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                    void** request) noexcept;
ncclResult_t test(void* request, int* done, int* sizes) noexcept;
ncclResult_t closeSend(void* sendComm) noexcept;
ncclResult_t closeRecv(void* recvComm) noexcept;
ncclResult_t closeListen(void* listenComm) noexcept;
ncclResult_t getDeviceMr(void* comm, void* mhandle, void** dptr_mhandle) noexcept;
ncclResult_t irecvConsumed(void* recvComm, int n, void* request) noexcept;
ncclResult_t finalize(void* ctx) noexcept;
ncclResult_t setNetAttr(void* ctx, nccl::ncclNetAttr_v11_t* attr) noexcept;

}  // namespace crystal::plugin::net
