// ncclTuner_v4_t: init(nRanks, nNodes, logger, &ctx); getCollInfo as v5 (with regBuff); destroy.
#pragma once

#include "crystal/nccl/common.h"

namespace crystal::nccl {

struct ncclTuner_v4_t {
  const char* name;
  ncclResult_t (*init)(std::size_t nRanks, std::size_t nNodes, ncclDebugLogger_t logFunction,
                       void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, std::size_t nBytes,
                              int numPipeOps, float** collCostTable, int numAlgo, int numProto,
                              int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* context);
};


}  // namespace crystal::nccl
