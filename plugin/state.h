// Process-wide plugin state: the target (config + model), the NICs reported to NCCL, the
// port queues of the timing model, and the per-communicator contexts (v11 init).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "crystal/config/config.h"
#include "crystal/live/handle.h"
#include "crystal/live/link_timing.h"
#include "crystal/live/ring_timing.h"
#include "crystal/live/target_model.h"
#include "crystal/live/tree_comm.h"
#include "op_segments.h"
#include "profiler/proxy_ops.h"
#include "virtual_data.h"

namespace crystal::plugin {

struct NicInfo {
  std::string name;  // crystal0, crystal1, ...
  int speed_mbps = 0;
  float latency_us = 0;
  std::uint64_t guid = 0;
  std::shared_ptr<live::PortQueue> out = std::make_shared<live::PortQueue>();
  std::shared_ptr<live::PortQueue> in = std::make_shared<live::PortQueue>();
};

// Identity of a connection to a virtual peer, as the host wrote it into the VirtualPeer
// handle (send) or the Hello (receive); crystal/live/handle.h.
struct VirtualConn {
  bool send = true;
  std::uint64_t comm_id = 0;
  int self_rank = -1;  // the real rank
  int peer_rank = -1;  // the virtual rank
  int nranks = 0;
  int distance = 0;
  int ordinal = 0;
  std::uint8_t graph = live::kGraphUnknown;
  int tree_channels = 0;  // NCCL's channels per tree before duplication; 0 = unknown
};

// The timing of one ring channel of real rank `self_rank` in a comm of `links` (NetContext's
// rings; P2P pacing, p2p_pacer.h): its node's ring positions from its own on. `busy` and
// `connected` are shared by the comm's channels (crystal/live/ring_timing.h).
[[nodiscard]] std::shared_ptr<live::RingChannel> makeRingChannel(
    const live::CommLinks& links, int self_rank, std::shared_ptr<std::atomic<int>> busy,
    std::shared_ptr<std::atomic<int>> connected);

// Per net context (one per v11 init): the timing state shared by the connections of its
// communicators. A ring channel's send (to next) and receive (from prev) share one
// RingChannel, found by (comm, channel ordinal); see docs/plugin.md "Pairing".
struct NetContext {
  std::uint64_t comm_id = 0;
  std::mutex mu;
  // The timing of a new connection to a virtual peer on net device `dev`.
  [[nodiscard]] std::shared_ptr<live::VirtualLink> virtualLink(const VirtualConn& c, int dev);
  // The timing of a real<->real connection of this context's comm between `self_rank` and
  // `peer_rank` of `nranks`: the target's NVLink (and the real GPU's NVLink port) when the two
  // share a target node, else the NET link of the world's NIC (also when a rank is unknown,
  // -1: a peer of an older build, a comm the interposer did not see).
  struct RealLink {
    live::LinkParams link;
    std::shared_ptr<live::PortQueue> port;
    bool nvlink = false;
  };
  [[nodiscard]] RealLink realLink(int self_rank, int peer_rank, int nranks, int dev, bool send);
  // Data policy mirror (virtual_data.h): the MirrorChannel a connection shares with its
  // partner. A ring channel's receive (from prev) pairs with the same ring channel's send
  // (to next) by (comm, real rank, channel ordinal); a connection without identity (a host
  // or test that does not send one) pairs by creation order (k-th send with k-th receive);
  // tree, PAT and p2p connections get none (their receives carry zeros).
  [[nodiscard]] std::shared_ptr<MirrorChannel> mirrorFor(const VirtualConn& c);
  // The operation queue of a ring connection (op_segments.h), which
  // PluginState::proxyOpStarted feeds, or of a tree connection to the real rank's ring
  // neighbour whose NCCL channel is known (a ring connected after the tree shares it);
  // nullptr for other connections.
  [[nodiscard]] std::shared_ptr<OpSegments> opSegmentsFor(const VirtualConn& c);
  // The RingChannel of ring channel `ordinal` of real rank `self_rank` in comm `comm` whose
  // receive from the previous member is a NET connection of this context, or nullptr. (P2P
  // pacing feeds it the rank's sends over P2P, plugin/p2p_pacer.h.)
  [[nodiscard]] std::shared_ptr<live::RingChannel> ringReceiving(std::uint64_t comm,
                                                                 int self_rank, int ordinal);

 private:
  // The real rank's trees in c's communicator (made at its first tree connection), under mu.
  [[nodiscard]] live::TreeComm& treeFor(const VirtualConn& c);
  struct RingPlan {
    live::CommLinks links;
    int period = 1;
    int position = 0;  // the real rank's ring position in its node
    std::shared_ptr<std::atomic<int>> busy = std::make_shared<std::atomic<int>>(0);
    std::shared_ptr<std::atomic<int>> connected = std::make_shared<std::atomic<int>>(0);
    struct Channel {
      std::shared_ptr<live::RingChannel> ring;
      bool has_send = false, has_recv = false;
    };
    std::map<int, Channel> channels;  // by ordinal
  };
  RingPlan& planFor(const VirtualConn& c);
  [[nodiscard]] std::shared_ptr<live::RingChannel> makeChannel(RingPlan& plan);
  std::map<std::pair<std::uint64_t, int>, RingPlan> plans_;  // by (comm, real rank)
  std::map<int, live::CommLinks> links_;                    // by nranks
  // links_'s entry for `nranks`, made on first use (the caller holds mu).
  [[nodiscard]] const live::CommLinks& linksFor(int nranks);
  // Tree channels by (comm, real rank): crystal/live/tree_comm.h.
  std::map<std::pair<std::uint64_t, int>, std::shared_ptr<live::TreeComm>> trees_;
  bool ring_warned_ = false;
  struct MirrorPair {
    std::shared_ptr<MirrorChannel> channel = std::make_shared<MirrorChannel>();
    bool has_send = false, has_recv = false;
  };
  std::map<std::tuple<std::uint64_t, int, int>, MirrorPair> ring_mirrors_;  // comm, rank, ordinal
  std::vector<std::shared_ptr<MirrorChannel>> mirrors_;  // connections without identity
  std::size_t mirror_sends_ = 0, mirror_recvs_ = 0;
};
// The target config: CRYSTAL_CONFIG through crystal::loadConfig, else built-in defaults.
// Throws InputError (bad file, or a loader that is not part of this build).
[[nodiscard]] Config loadTargetConfig();

class PluginState {
 public:
  static PluginState& get();

  // Loads config and model once (thread-safe). Throws InputError on a bad config/env.
  void ensureInit();
  // Whether ensureInit or configure ran (NCCL initialised this library as its net plugin).
  [[nodiscard]] bool initialized() {
    std::lock_guard lock(mu_);
    return ready_;
  }
  // For tests that build a target in code: replaces config and model.
  void configure(const Config& cfg);

  [[nodiscard]] const Config& config() const { return cfg_; }
  [[nodiscard]] const live::TargetModel& model() const { return *model_; }
  [[nodiscard]] int ndev() const { return static_cast<int>(nics_.size()); }
  [[nodiscard]] NicInfo& nic(int dev);  // throws BadArgument for a bad index
  [[nodiscard]] live::LinkParams link() const { return link_; }
  // The real GPU's NVLink (NVSwitch) port, per direction, shared by its comms.
  [[nodiscard]] const std::shared_ptr<live::PortQueue>& nvlOut() const { return nvl_out_; }
  [[nodiscard]] const std::shared_ptr<live::PortQueue>& nvlIn() const { return nvl_in_; }
  // The real GPU's own NIC in the target, per direction: every peer-ready (p2p, PAT) NET
  // connection queues on it, whichever crystal device NCCL put it on (NCCL may spread p2p
  // channels over several of the emulated NICs; the model's p2p time uses one NIC).
  [[nodiscard]] const std::shared_ptr<live::PortQueue>& ownNicOut() const { return nic_out_; }
  [[nodiscard]] const std::shared_ptr<live::PortQueue>& ownNicIn() const { return nic_in_; }
  // NCCL's proxy thread of the real rank, as the target's runs it: every peer-ready NET
  // transfer takes a turn of LinkParams::request_ns on it (crystal/live/link_timing.h).
  [[nodiscard]] const std::shared_ptr<live::PortQueue>& proxy() const { return proxy_; }
  [[nodiscard]] int maxRecvs() const { return max_recvs_; }
  [[nodiscard]] std::size_t maxBytes() const { return max_bytes_; }
  [[nodiscard]] bool tunerEnabled() const { return tuner_; }
  // Ring folding (plugin/ring_fold.h) on comm `comm` (its figures: config().emulation):
  // CRYSTAL_FOLD_RINGS when set, else off for a comm whose rings stay on the node
  // (setCommRingsOnNode), else emulation.fold_rings.
  [[nodiscard]] bool foldRings(std::uint64_t comm) const;
  // Comm `comm`'s rings run over P2P at the real rank on both sides (emulation.p2p_peers, the
  // rank in the middle of its node, or one node): folding would only slow them (p2p_agent.h
  // paces every channel; 2026-12-04, one node: 1 MiB all-reduce on 2 folded channels 80 us,
  // on 28 50 us), and with more real channels than the target's the tuner may run them on
  // more (ring_fold.h onNodeRingChannels). Elsewhere (a node's first or last rank, whose rings
  // enter over the NET on every channel; split children, which are NET only) folding spares
  // NCCL's proxy as on the default path.
  void setCommRingsOnNode(std::uint64_t comm);
  [[nodiscard]] bool ringsOnNode(std::uint64_t comm) const;
  // NCCL's tree of comm `comm` runs over nodes of `ranks` consecutive ranks (emulation.
  // p2p_peers with every node full: the host fuses the real rank's node and copies it for
  // the others), not over one node per rank: live::TreeComm::setNodeRanks. 0: per rank.
  void setCommNodeRanks(std::uint64_t comm, int ranks);
  [[nodiscard]] int commNodeRanks(std::uint64_t comm) const;
  // NCCL_MIN_NCHANNELS as NCCL reads it (0 = unset): the ring channels the real rank's NCCL
  // builds at least, up to which the tuner may run a large broadcast or reduce (ring_fold.h).
  [[nodiscard]] int ncclMinChannels() const { return nccl_min_channels_; }
  [[nodiscard]] bool sharedClock() const { return shared_clock_; }
  [[nodiscard]] std::uint64_t emulationId() const { return emulation_id_; }
  [[nodiscard]] const std::string& socketAddr() const { return socket_addr_; }
  [[nodiscard]] bool rdmaPresent() const { return rdma_; }
  // emulation.data, overridden by CRYSTAL_DATA.
  [[nodiscard]] DataPolicy dataPolicy() const { return data_; }
  // emulation.gdr, overridden by CRYSTAL_GDR: NICs report NCCL_PTR_CUDA (GPU buffers).
  [[nodiscard]] bool gdr() const { return gdr_; }

  // Contexts: one per v11 init (commId); v8..v10 share the default one.
  [[nodiscard]] NetContext* newContext(std::uint64_t comm_id);
  void dropContext(NetContext* ctx);
  [[nodiscard]] NetContext* checkContext(void* ctx);  // throws BadUsage if unknown
  [[nodiscard]] NetContext* defaultContext() { return &default_ctx_; }
  // NetContext::ringReceiving over every context, or nullptr.
  [[nodiscard]] std::shared_ptr<live::RingChannel> ringReceiving(std::uint64_t comm,
                                                                 int self_rank, int ordinal);

  // Operation queues by (NCCL commHash, channel, peer rank, direction). A ring connection's
  // channel is its exchange ordinal (NCCL connects ring channels 0..n-1 in one exchange).
  // A new connection with the same key replaces the old one's queue. `nranks`: the
  // communicator's size (a ring all-gather's steps per loop are nranks - 1); `self_rank`:
  // the real rank's (a broadcast's or reduce's chain position, OpSegments::Place).
  [[nodiscard]] std::shared_ptr<OpSegments> newOpSegments(std::uint64_t comm, int channel, int peer,
                                                          bool send, int nranks = 0,
                                                          int self_rank = -1);
  // NCCL's profiler announced an operation on a connection (plugin/profiler/proxy_ops.h);
  // dropped unless a live connection asked for that key, or when not a collective's (op 0:
  // p2p runs on another connection to the same channel and peer). Any thread.
  // `rewritable`: an all-reduce, reduce-scatter, reduce or broadcast, whose received bytes are
  // free (OpSegments::Place::bytes_free) when the interposer rewrites the communicator's
  // results; `channels`: the collective's channel count (0 = unknown).
  void proxyOpStarted(const profiler::ProxyOpStart& s);
  // Whether a connection of communicator `comm` asked for its proxy operations (newOpSegments)
  // since the process started: the profiler's collective events are kept only then. Lock-free
  // (NCCL asks on the program's thread, once a collective); true once more communicators than
  // it tracks asked.
  [[nodiscard]] bool feedsProxyOps(std::uint64_t comm) const noexcept;

  // Data policy mirror: the interposer writes every reduction result of communicator `comm`
  // (NCCL's commHash) itself, and every broadcast's from a virtual root (plugin/
  // mirror_result.h), so what virtual peers send for those operations is never read and the
  // plugin need not mirror it. Set at creation, cleared
  // when the program makes a custom reduction op (the interposer leaves those alone).
  void setResultsRewritten(std::uint64_t comm, bool on);
  [[nodiscard]] bool resultsRewritten(std::uint64_t comm) const;

  // The real rank of this process in communicator `comm` (NCCL's commHash) and the comm's
  // size, as the interposer learnt them before NCCL's init ran (a split child: once the split
  // returned, before NCCL's runtime connections). Real<->real connections carry them, so each
  // side times the link as the target's between those two ranks (NetContext::realLink).
  struct CommRank {
    int rank = -1;
    int nranks = 0;
  };
  void setCommRank(std::uint64_t comm, int rank, int nranks);
  [[nodiscard]] CommRank commRank(std::uint64_t comm) const;  // {-1, 0} when unknown

 private:
  PluginState() = default;
  void applyLocked(const Config& cfg);

  std::mutex mu_;
  mutable std::mutex ops_mu_;
  std::set<std::uint64_t> rewritten_;             // under ops_mu_
  std::map<std::uint64_t, CommRank> comm_ranks_;  // under ops_mu_
  std::map<std::tuple<std::uint64_t, int, int, bool>, std::weak_ptr<OpSegments>> op_segments_;
  // feedsProxyOps: the communicators newOpSegments saw (0: a free entry; written under ops_mu_),
  // and whether more came than fit.
  static constexpr std::size_t kFedComms = 64;
  std::array<std::atomic<std::uint64_t>, kFedComms> fed_comms_{};
  std::atomic<bool> fed_many_{false};
  bool ready_ = false;
  Config cfg_;
  std::unique_ptr<live::TargetModel> model_;
  std::vector<NicInfo> nics_;
  live::LinkParams link_;
  std::shared_ptr<live::PortQueue> nvl_out_ = std::make_shared<live::PortQueue>();
  std::shared_ptr<live::PortQueue> nvl_in_ = std::make_shared<live::PortQueue>();
  std::shared_ptr<live::PortQueue> nic_out_ = std::make_shared<live::PortQueue>();
  std::shared_ptr<live::PortQueue> nic_in_ = std::make_shared<live::PortQueue>();
  std::shared_ptr<live::PortQueue> proxy_ = std::make_shared<live::PortQueue>();
  int max_recvs_ = 8;
  std::size_t max_bytes_ = std::size_t{1} << 40;
  bool tuner_ = true;
  bool fold_rings_ = true;
  bool fold_rings_env_ = false;  // CRYSTAL_FOLD_RINGS was set: it wins over every comm's
  mutable std::mutex fold_mu_;
  std::set<std::uint64_t> rings_on_node_;  // setCommRingsOnNode
  std::map<std::uint64_t, int> node_ranks_;  // setCommNodeRanks
  int nccl_min_channels_ = 0;
  bool shared_clock_ = true;
  bool rdma_ = false;
  DataPolicy data_ = DataPolicy::Mirror;
  bool gdr_ = true;
  std::uint64_t emulation_id_ = 0;
  std::string socket_addr_;
  NetContext default_ctx_;
  std::list<NetContext> contexts_;
};

}  // namespace crystal::plugin
