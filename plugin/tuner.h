// Tuner: tells NCCL what the target would choose for each collective (cost table in NCCL's
// layout from TargetModel::costTable, channel count from TargetModel::choose).
#pragma once

#include <cstddef>
#include <cstdint>

#include "crystal/live/target_model.h"
#include "crystal/nccl/tuner_v5.h"

namespace crystal::plugin {

// How a communicator of nRanks over nNodes (as NCCL sees it) sits on the target. A real rank
// alone on its emulated host makes NCCL see one rank per node (nNodes == nRanks); the target
// packs cluster.gpus_per_node ranks per node. Otherwise NCCL's own grouping is real.
[[nodiscard]] model::CommShape targetShape(const ClusterConfig& cluster, std::size_t nRanks,
                                           std::size_t nNodes);

// Overwrites the entries NCCL marked usable (!= -1) with the target's costs (us); entries the
// target model does not support become -1, unless that would leave none usable (then the
// table is left as NCCL filled it). Sets *nChannels to the target's channel count when the
// target's choice is still usable. Returns true if the table was changed.
bool applyTargetCosts(const live::TargetModel& m, nccl::ncclFunc_t f, std::size_t bytes,
                      const model::CommShape& shape, float* table, int numAlgo, int numProto,
                      int* nChannels);

// The entry NCCL picks from a cost table: the smallest non-negative cost (first on ties).
struct TunerPick {
  int algo = -1, proto = -1;
  float cost = -1;
};
[[nodiscard]] TunerPick bestEntry(const float* table, int numAlgo, int numProto);
[[nodiscard]] const char* ncclAlgoName(int a);   // NCCL's spelling: RING, TREE, ...
[[nodiscard]] const char* ncclProtoName(int p);  // LL, LL128, SIMPLE
[[nodiscard]] const char* ncclFuncName(int f);   // AllReduce, ...

namespace tuner {
using nccl::ncclResult_t;
ncclResult_t init(void** ctx, std::uint64_t commId, std::size_t nRanks, std::size_t nNodes,
                  nccl::ncclDebugLogger_t logger, nccl::ncclNvlDomainInfo_v5_t* nvl,
                  nccl::ncclTunerConstants_v5_t* constants) noexcept;
ncclResult_t getCollInfo(void* ctx, nccl::ncclFunc_t f, std::size_t nBytes, int numPipeOps,
                         float** collCostTable, int numAlgo, int numProto, int regBuff,
                         int* nChannels) noexcept;
ncclResult_t finalize(void* ctx) noexcept;
}  // namespace tuner

}  // namespace crystal::plugin
