// Every symbol NCCL looks up in libnccl-net-crystal.so, in one place. One implementation
// (net_api.cc, tuner.cc) has the newest semantics; each older version is a few-line shim that
// exists only because NCCL 2.28 still probes for it (ncclNetPlugin_v11 first, then v10 ...).
#include <cstring>

#include "crystal/nccl/net_v10.h"
#include "crystal/nccl/net_v11.h"
#include "crystal/nccl/net_v8.h"
#include "crystal/nccl/net_v9.h"
#include "crystal/nccl/tuner_v3.h"
#include "crystal/nccl/tuner_v4.h"
#include "crystal/nccl/tuner_v5.h"
#include "errors.h"
#include "net_api.h"
#include "tuner.h"

#define CRYSTAL_EXPORT extern "C" __attribute__((visibility("default")))

namespace crystal::plugin::shim {
namespace {

using namespace crystal::nccl;

// v10/v9 properties: v11 minus maxMultiRequestSize (same leading layout).
ncclResult_t getPropertiesV10(int dev, ncclNetProperties_v10_t* props) {
  ncclNetProperties_v11_t p{};
  const ncclResult_t r = net::getProperties(dev, &p);
  if (r != ncclSuccess || !props) return r == ncclSuccess ? ncclInvalidArgument : r;
  props->name = p.name;
  props->pciPath = p.pciPath;
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport;
  props->regIsGlobal = p.regIsGlobal;
  props->forceFlush = p.forceFlush;
  props->speed = p.speed;
  props->port = p.port;
  props->latency = p.latency;
  props->maxComms = p.maxComms;
  props->maxRecvs = p.maxRecvs;
  props->netDeviceType = p.netDeviceType;
  props->netDeviceVersion = p.netDeviceVersion;
  props->vProps = p.vProps;
  props->maxP2pBytes = p.maxP2pBytes;
  props->maxCollBytes = p.maxCollBytes;
  return ncclSuccess;
}

ncclResult_t getPropertiesV8(int dev, ncclNetProperties_v8_t* props) {
  ncclNetProperties_v11_t p{};
  const ncclResult_t r = net::getProperties(dev, &p);
  if (r != ncclSuccess || !props) return r == ncclSuccess ? ncclInvalidArgument : r;
  props->name = p.name;
  props->pciPath = p.pciPath;
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport;
  props->regIsGlobal = p.regIsGlobal;
  props->speed = p.speed;
  props->port = p.port;
  props->latency = p.latency;
  props->maxComms = p.maxComms;
  props->maxRecvs = p.maxRecvs;
  props->netDeviceType = p.netDeviceType;
  props->netDeviceVersion = p.netDeviceVersion;
  return ncclSuccess;
}

// v8..v10: one process-wide init, no ctx (the default context stands in).
ncclResult_t initV10(ncclDebugLogger_t l, ncclProfilerCallback_t p) {
  return net::init(nullptr, 0, nullptr, l, p);
}
ncclResult_t initV9(ncclDebugLogger_t l) { return net::init(nullptr, 0, nullptr, l, nullptr); }
ncclResult_t listenNoCtx(int dev, void* h, void** lc) { return net::listen(nullptr, dev, h, lc); }
ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t*, void* h, void** sc,
                        ncclNetDeviceHandle_v10_t** dc) {
  return net::connect(nullptr, dev, h, sc, dc);
}
ncclResult_t connectV9(int dev, void* h, void** sc, ncclNetDeviceHandle_v9_t** dc) {
  return net::connect(nullptr, dev, h, sc, dc);
}
ncclResult_t isendV9(void* sc, void* d, std::size_t size, int tag, void* mh, void** req) {
  return net::isend(sc, d, size, tag, mh, nullptr, req);
}
ncclResult_t irecvV9(void* rc, int n, void** d, std::size_t* sizes, int* tags, void** mh,
                     void** req) {
  return net::irecv(rc, n, d, sizes, tags, mh, nullptr, req);
}
// v8: int sizes.
ncclResult_t isendV8(void* sc, void* d, int size, int tag, void* mh, void** req) {
  if (size < 0) return ncclInvalidArgument;
  return net::isend(sc, d, static_cast<std::size_t>(size), tag, mh, nullptr, req);
}
ncclResult_t irecvV8(void* rc, int n, void** d, int* sizes, int* tags, void** mh, void** req) {
  if (n < 1 || n > 8 || !sizes) return ncclInvalidArgument;
  std::size_t s[8];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    s[i] = static_cast<std::size_t>(sizes[i]);
  }
  return net::irecv(rc, n, d, s, tags, mh, nullptr, req);
}

// Tuner v4/v3: process-wide init order (nRanks, nNodes, logger, &ctx), no commId.
ncclResult_t tunerInitV4(std::size_t nRanks, std::size_t nNodes, ncclDebugLogger_t l, void** ctx) {
  return tuner::init(ctx, 0, nRanks, nNodes, l, nullptr, nullptr);
}
ncclResult_t tunerGetCollInfoV3(void* ctx, ncclFunc_t f, std::size_t nBytes, int numPipeOps,
                                float** table, int numAlgo, int numProto, int* nChannels) {
  return tuner::getCollInfo(ctx, f, nBytes, numPipeOps, table, numAlgo, numProto, 0, nChannels);
}

}  // namespace
}  // namespace crystal::plugin::shim

namespace net = crystal::plugin::net;
namespace shim = crystal::plugin::shim;
namespace tuner = crystal::plugin::tuner;
using namespace crystal::nccl;

// v11 (NCCL 2.28): the implementation itself; per-communicator init/finalize, setNetAttr.
CRYSTAL_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    "crystal",        net::init,          net::devices,    net::getProperties, net::listen,
    net::connect,     net::accept,        net::regMr,      net::regMrDmaBuf,   net::deregMr,
    net::isend,       net::irecv,         net::iflush,     net::test,          net::closeSend,
    net::closeRecv,   net::closeListen,   net::getDeviceMr, net::irecvConsumed,
    /*makeVDevice=*/nullptr, net::finalize, net::setNetAttr};

// v10 (NCCL 2.23-2.27): process-wide init with profiler, comm config on connect.
CRYSTAL_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    "crystal",       shim::initV10,    net::devices,     shim::getPropertiesV10, shim::listenNoCtx,
    shim::connectV10, net::accept,     net::regMr,       net::regMrDmaBuf,       net::deregMr,
    net::isend,      net::irecv,       net::iflush,      net::test,              net::closeSend,
    net::closeRecv,  net::closeListen, net::getDeviceMr, net::irecvConsumed,
    /*makeVDevice=*/nullptr};

// v9 (NCCL 2.22): no profiler handles, size_t sizes, makeVDevice.
CRYSTAL_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    "crystal",       shim::initV9,     net::devices,     shim::getPropertiesV10, shim::listenNoCtx,
    shim::connectV9, net::accept,      net::regMr,       net::regMrDmaBuf,       net::deregMr,
    shim::isendV9,   shim::irecvV9,    net::iflush,      net::test,              net::closeSend,
    net::closeRecv,  net::closeListen, net::getDeviceMr, net::irecvConsumed,
    /*makeVDevice=*/nullptr};

// v8 (NCCL 2.19-2.21): int sizes on isend/irecv, shorter properties.
CRYSTAL_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    "crystal",       shim::initV9,     net::devices,     shim::getPropertiesV8, shim::listenNoCtx,
    shim::connectV9, net::accept,      net::regMr,       net::regMrDmaBuf,      net::deregMr,
    shim::isendV8,   shim::irecvV8,    net::iflush,      net::test,             net::closeSend,
    net::closeRecv,  net::closeListen, net::getDeviceMr, net::irecvConsumed};

// Tuner v5 (NCCL 2.28): per-communicator init with commId and constants.
CRYSTAL_EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {"crystal", tuner::init,
                                                         tuner::getCollInfo, tuner::finalize};
// Tuner v4 (NCCL 2.23-2.26): no commId, regBuff present.
CRYSTAL_EXPORT const ncclTuner_v4_t ncclTunerPlugin_v4 = {
    "crystal", shim::tunerInitV4, tuner::getCollInfo, tuner::finalize};
// Tuner v3 (NCCL 2.21-2.22): getCollInfo without regBuff.
CRYSTAL_EXPORT const ncclTuner_v3_t ncclTunerPlugin_v3 = {
    "crystal", shim::tunerInitV4, shim::tunerGetCollInfoV3, tuner::finalize};
