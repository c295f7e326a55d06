// What the P2P pacer's stand-ins (p2p_pacer_test.cc, p2p_pacer_lag_test.cc, p2p_prelude_test.cc)
// run against: the built-in target over some nodes, the model's loop of back-to-back chain
// operations as a stand-in sees it, R's kernel on one channel (the slices it moves and its
// counters), and a pacer of R with its channels connected.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "crystal/live/target_model.h"
#include "crystal/model/nccl_model.h"
#include "p2p_agent_rules.h"
#include "p2p_pacer.h"
#include "state.h"

namespace crystal::test {

inline constexpr std::uint64_t MiB = 1u << 20;

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

// Per slice of one ring channel, whether R's kernel receives and whether it sends: NCCL
// 2.28.9's device/all_reduce.h (step 0 sends, 2n-3 steps receive and send, the last receives)
// or all_gather.h's / reduce_scatter.h's (n-1 sends, n-1 receives), 2 slices a step. `units`:
// sends per channel (RingOpShape::units).
inline std::vector<std::pair<bool, bool>> ringSlices(model::Func f, int n, std::uint64_t units) {
  const int sends_per_loop = f == model::Func::AllReduce ? 2 * (n - 1) : n - 1;
  const std::uint64_t loops = units / (2 * static_cast<std::uint64_t>(sends_per_loop));
  std::vector<std::pair<bool, bool>> out;
  for (std::uint64_t l = 0; l < loops; ++l) {
    for (int s = 0; s <= sends_per_loop; ++s)
      for (int j = 0; j < 2; ++j) out.emplace_back(s > 0, s < sends_per_loop);
  }
  return out;
}

// One channel of the real rank's kernel as NCCL 2.28.9's Simple kernels run it: per slice
// (ringSlices, or a chain's units), wait for the receive (R's recv tail) and the send credit
// (R's send head), then post both (V's recv tail, V's send head). R's tail and head move as
// the agent kernel moves them (p2p_agent_rules.h: the pacer's release within R's slots;
// credits a unit's occupancy after R sent it).
struct KernelChannel {
  int send_conn = -1, recv_conn = -1;
  // The program: per slice, whether it receives and whether it sends.
  std::vector<std::pair<bool, bool>> slices;
  std::size_t next = 0;                        // the next slice
  std::uint64_t send_step = 0, recv_step = 0;  // R's own step counters
  std::uint64_t head = 0, tail = 0;            // R's send head, recv tail (the agent's)
  std::uint64_t released = 0;                  // the pacer's release of the recv tail
  plugin::p2p_agent::CreditQueue credits;
  // The next slice's receive and credit are there since (a stand-in whose kernel takes time).
  live::TimeNs ready_since = -1;
};

// A pacer of R (`rank` of `nranks`) with `channels` ring channels connected, and its kernel's
// channels (connection indices; the rest as KernelChannel starts).
struct Setup {
  plugin::P2pPacer pacer;
  std::vector<KernelChannel> chans;
};

inline std::unique_ptr<Setup> connect(int nranks, int channels, int rank = 0,
                                      const Config& cfg = targetNodes(1)) {
  plugin::PluginState::get().configure(cfg);
  const live::CommLinks links =
      live::commLinks(plugin::PluginState::get().model(), cfg.cluster, nranks);
  auto busy = std::make_shared<std::atomic<int>>(0);
  auto connected = std::make_shared<std::atomic<int>>(channels);
  auto s = std::make_unique<Setup>(Setup{
      plugin::P2pPacer(
          nranks,
          [=](bool connection) {
            return plugin::makeRingChannel(links, rank, connection ? busy : nullptr, connected);
          },
          rank),
      {}});
  // NCCL's exchange: receive entries, then send entries, by channel ordinal.
  s->chans.resize(static_cast<std::size_t>(channels));
  for (int k = 0; k < channels; ++k)
    s->chans[static_cast<std::size_t>(k)].recv_conn = s->pacer.add(false, k);
  for (int k = 0; k < channels; ++k)
    s->chans[static_cast<std::size_t>(k)].send_conn = s->pacer.add(true, k);
  return s;
}

}  // namespace crystal::test
