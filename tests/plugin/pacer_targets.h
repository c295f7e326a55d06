// What the P2P pacer's stand-ins (p2p_pacer_test.cc, p2p_pacer_lag_test.cc) run against: the
// built-in target over some nodes, and the model's loop of back-to-back chain operations as
// a stand-in sees it.
#pragma once

#include <cstdint>

#include "crystal/live/target_model.h"
#include "crystal/model/nccl_model.h"
#include "state.h"

namespace crystal::test {

inline Config targetNodes(int n) {
  Config cfg;  // built-in target: H200 nodes of 8 GPUs
  cfg.cluster.nodes = n;
  return cfg;
}

// NcclModel::loopTimeAtRank less the per-call overhead, which a stand-in does not spend (on
// the GPU R's kernel is the real one): us an operation of `iters` back to back.
inline double modelLoopUs(model::Func f, int root, int n, int channels, int rank,
                          std::uint64_t bytes, int iters, const Config& cfg) {
  const model::NcclModel m(cfg.cluster, cfg.model);
  const model::CommShape shape = live::blockShape(cfg.cluster, n);
  return m.loopTimeAtRank(f, bytes, shape, model::Algo::Ring, model::Proto::Simple, channels, rank,
                          root, iters) -
         m.opOverheadUs(model::Algo::Ring, model::Proto::Simple) / iters;
}

}  // namespace crystal::test
