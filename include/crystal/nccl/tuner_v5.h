// ncclTuner_v5_t (NCCL 2.28): per-communicator init with commId, NVLink domain info and
// writable tuner constants. getCollInfo's collCostTable is really a float[numAlgo][numProto]
// array passed as float** (NCCL casts it); index it as such.
#pragma once

#include "crystal/nccl/common.h"

namespace crystal::nccl {

struct ncclNvlDomainInfo_v5_t {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
};

// [algorithms 7][protocols 3], [hw links 3], [compcaps 4][tuning scales 3].
struct ncclTunerConstants_v5_t {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
};

struct ncclTuner_v5_t {
  const char* name;
  ncclResult_t (*init)(void** ctx, std::uint64_t commId, std::size_t nRanks, std::size_t nNodes,
                       ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t* nvlDomainInfo,
                       ncclTunerConstants_v5_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, std::size_t nBytes,
                              int numPipeOps, float** collCostTable, int numAlgo, int numProto,
                              int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
};


}  // namespace crystal::nccl
