#include "tuner.h"

#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "app_call_stats.h"
#include "crystal/base/log.h"
#include "crystal/live/collective_log.h"
#include "errors.h"
#include "nccl_log.h"
#include "ring_fold.h"
#include "state.h"
#include "tuner_memo.h"

namespace crystal::plugin {

model::CommShape targetShape(const ClusterConfig& cluster, std::size_t nRanks,
                             std::size_t nNodes) {
  model::CommShape s;
  s.nranks = static_cast<int>(std::max<std::size_t>(1, nRanks));
  const std::size_t nodes = std::max<std::size_t>(1, nNodes);
  if (nodes == nRanks && nRanks > 1) {
    s.ranks_per_node = std::min(std::max(1, cluster.gpus_per_node), s.nranks);
  } else {
    s.ranks_per_node = static_cast<int>(std::max<std::size_t>(1, nRanks / nodes));
  }
  s.nnodes = (s.nranks + s.ranks_per_node - 1) / s.ranks_per_node;
  return s;
}

bool applyTargetCosts(const live::TargetModel& m, nccl::ncclFunc_t f, std::size_t bytes,
                      const model::CommShape& shape, float* table, int numAlgo, int numProto,
                      int* nChannels) {
  if (f < nccl::ncclFuncBroadcast || f > nccl::ncclFuncAllReduce) return false;
  const auto func = static_cast<model::Func>(f);
  const model::CostTable cost = m.costTable(func, bytes, shape);
  const int na = std::min(numAlgo, model::kNumAlgos);
  const int np = std::min(numProto, model::kNumProtos);
  int usable = 0;
  for (int a = 0; a < na; ++a)
    for (int p = 0; p < np; ++p)
      if (table[a * numProto + p] != nccl::kAlgoProtoIgnore && cost[a][p] >= 0) ++usable;
  if (usable == 0) return false;
  float best = -1;
  int best_a = -1, best_p = -1;
  for (int a = 0; a < numAlgo; ++a)
    for (int p = 0; p < numProto; ++p) {
      float& e = table[a * numProto + p];
      if (e == nccl::kAlgoProtoIgnore) continue;
      e = (a < na && p < np && cost[a][p] >= 0) ? cost[a][p] : nccl::kAlgoProtoIgnore;
      if (e >= 0 && (best < 0 || e < best)) { best = e; best_a = a; best_p = p; }
    }
  // The target's channel count for the entry NCCL will run: the model's pick's, or (NCCL_PROTO
  // or NCCL_ALGO ruled that out) the one the target would use for the entry left. Left to
  // NCCL, the count would be all the real rank's channels (NCCL_MIN_NCHANNELS), which is the
  // target's only by chance: with 32 the 16 MiB tree all-reduce ran on 32 (+59 % on the H200).
  const model::Choice c = m.choose(func, bytes, shape);
  if (nChannels && best_a >= 0) {
    if (static_cast<int>(c.algo) == best_a && static_cast<int>(c.proto) == best_p)
      *nChannels = c.channels;
    else if (best_a < na && best_p < np)
      *nChannels = m.channels(func, bytes, shape, static_cast<model::Algo>(best_a),
                              static_cast<model::Proto>(best_p));
  }
  return true;
}

TunerPick bestEntry(const float* table, int numAlgo, int numProto) {
  TunerPick best;
  for (int a = 0; a < numAlgo; ++a)
    for (int p = 0; p < numProto; ++p) {
      const float e = table[a * numProto + p];
      if (e >= 0 && (best.algo < 0 || e < best.cost)) best = {a, p, e};
    }
  return best;
}

const char* ncclAlgoName(int a) {
  static const char* const kNames[] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN",
                                       "NVLS", "NVLS_TREE", "PAT"};
  return a >= 0 && a < 7 ? kNames[a] : "?";
}

const char* ncclProtoName(int p) {
  static const char* const kNames[] = {"LL", "LL128", "SIMPLE"};
  return p >= 0 && p < 3 ? kNames[p] : "?";
}

const char* ncclFuncName(int f) {
  static const char* const kNames[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                       "AllReduce"};
  return f >= 0 && f < 5 ? kNames[f] : "?";
}

namespace tuner {
namespace {
struct TunerContext {
  std::uint64_t comm_id = 0;
  model::CommShape shape;
  bool enabled = true;
  std::mutex mu;                                 // guards memo and logged
  TunerMemo memo;                                // the model's answers, per (func, bytes)
  std::set<std::pair<int, std::size_t>> logged;  // (func, bytes) whose choice was logged
  std::shared_ptr<live::CollectiveLog> log;      // what NCCL runs next, for the tree timing
};
}  // namespace

ncclResult_t init(void** ctx, std::uint64_t commId, std::size_t nRanks, std::size_t nNodes,
                  nccl::ncclDebugLogger_t logger, nccl::ncclNvlDomainInfo_v5_t*,
                  nccl::ncclTunerConstants_v5_t*) noexcept {
  installNcclLogger(logger);
  LogSubsystem sub(nccl::kSubsysTuning);
  return guard("tuner init", [&] {
    if (!ctx) throw PluginError(Errc::BadArgument, "tuner init: ctx is null");
    PluginState& st = PluginState::get();
    st.ensureInit();
    auto t = std::make_unique<TunerContext>();
    t->comm_id = commId;
    t->shape = targetShape(st.config().cluster, nRanks, nNodes);
    t->enabled = st.tunerEnabled();
    t->log = live::collectiveLog(commId);
    CRYSTAL_INFO("tuner {} for comm {:#x}: NCCL sees {} ranks on {} nodes -> target {} ranks, "
                 "{} nodes x {} ({})",
                 t->enabled ? "on" : "off (CRYSTAL_TUNER=0 or emulation.tuner: false)", commId,
                 nRanks, nNodes, t->shape.nranks, t->shape.nnodes, t->shape.ranks_per_node,
                 st.model().name());
    *ctx = t.release();
  });
}

ncclResult_t getCollInfo(void* ctx, nccl::ncclFunc_t f, std::size_t nBytes, int,
                         float** collCostTable, int numAlgo, int numProto, int,
                         int* nChannels) noexcept {
  const AppSpan span(&AppCallStats::tuner_ns, &AppCallStats::tuner_calls);
  LogSubsystem sub(nccl::kSubsysTuning);
  return guard("tuner getCollInfo", [&] {
    auto* t = static_cast<TunerContext*>(ctx);
    if (!t || !collCostTable) throw PluginError(Errc::BadArgument, "getCollInfo: null argument");
    if (!t->enabled) return;
    // NCCL passes its float[numAlgo][numProto] table cast to float**.
    auto* table = reinterpret_cast<float*>(collCostTable);
    const int before = nChannels ? *nChannels : 0;
    {
      std::lock_guard lock(t->mu);
      if (!t->memo.apply(PluginState::get().model(), f, nBytes, t->shape, table, numAlgo, numProto,
                         nChannels))
        return;
    }
    // NCCL runs what it picks from this table, in enqueue order: the live tree timing reads
    // it when the proxy starts the operation (crystal/live/collective_log.h).
    const TunerPick run = bestEntry(table, numAlgo, numProto);
    // A ring runs on as few real channels as keep the model's pace (ring_fold.h). The
    // target's count for the entry NCCL runs: the model's pick's, or (NCCL_PROTO/NCCL_ALGO
    // forced another entry) that entry's.
    std::optional<RingFoldCost> fold;
    int target_channels = 0;
    PluginState& st = PluginState::get();
    const bool on_node = st.ringsOnNode(t->comm_id), fold_rings = st.foldRings(t->comm_id);
    if (nChannels && (on_node || fold_rings) &&
        run.algo == static_cast<int>(model::Algo::Ring) && run.proto >= 0 &&
        run.proto < model::kNumProtos) {
      target_channels = *nChannels;
      const EmulationConfig& e = st.config().emulation;
      const RingFoldParams params{e.gpu_channel_GBps, e.proxy_request_us,
                                  on_node ? e.gpu_slice_us : 0.0};
      const RingFoldInput in{static_cast<model::Func>(f),
                             static_cast<model::Proto>(run.proto),
                             nBytes,
                             t->shape.nranks,
                             target_channels,
                             st.ncclMinChannels(),
                             run.cost};
      if (!fold_rings) {
        // P2P rings at the real rank: more real channels when its GPU needs them.
        if (target_channels > 0) *nChannels = onNodeRingChannels(in, params);
      } else if (target_channels > 1) {
        *nChannels = ringChannelsToRun(in, params);
        fold = ringFoldCost(in, *nChannels, params);
      }
    }
    if (run.algo >= 0 && run.algo < model::kNumAlgos && run.proto >= 0 &&
        run.proto < model::kNumProtos) {
      live::CollectiveEntry e{static_cast<model::Func>(f), static_cast<model::Algo>(run.algo),
                              static_cast<model::Proto>(run.proto), nBytes,
                              nChannels ? std::max(0, *nChannels) : 0};  // 0: NCCL's own count
      // The pacing times the target's chain where R runs more channels (P2pPacer).
      if (target_channels > 0 && e.channels != target_channels) e.target_channels = target_channels;
      t->log->append(e);
    }
    // Once per (function, size): the pick NCCL will make from this table, in the words of
    // NCCL's own "AllReduce: N Bytes -> Algo RING proto LL" line, so the two can be compared.
    std::lock_guard lock(t->mu);
    if (!t->logged.insert({static_cast<int>(f), nBytes}).second) return;
    const TunerPick pick = bestEntry(table, numAlgo, numProto);
    const int ch = nChannels ? *nChannels : 0;
    CRYSTAL_INFO("tuner comm {:#x}: {}: {} Bytes -> Algo {} proto {} channels {}{}", t->comm_id,
                 ncclFuncName(static_cast<int>(f)), nBytes, ncclAlgoName(pick.algo),
                 ncclProtoName(pick.proto), ch != before ? std::to_string(ch) : "NCCL's",
                 fold ? fmt::format(" of the target's {} (folded: model {:.1f} us, GPU {:.1f} us, "
                                    "proxy {:.1f} us for {} NET requests)",
                                    target_channels, pick.cost, fold->gpu_us, fold->proxy_us,
                                    fold->requests)
                      : std::string());
  });
}

ncclResult_t finalize(void* ctx) noexcept {
  return guard("tuner finalize", [&] { delete static_cast<TunerContext*>(ctx); });
}

}  // namespace tuner
}  // namespace crystal::plugin
