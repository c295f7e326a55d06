// ncclTuner_v3_t: as v4 without regBuff.
#pragma once

#include "crystal/nccl/common.h"

namespace crystal::nccl {

struct ncclTuner_v3_t {
  const char* name;
  ncclResult_t (*init)(std::size_t nRanks, std::size_t nNodes, ncclDebugLogger_t logFunction,
                       void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, std::size_t nBytes,
                              int numPipeOps, float** collCostTable, int numAlgo, int numProto,
                              int* nChannels);
  ncclResult_t (*destroy)(void* context);
};


}  // namespace crystal::nccl
