#include "state.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "errors.h"
#include "params.h"
#include "rdma_probe.h"

namespace crystal::plugin {

namespace {
// NCCL_STEPS / 4 = sliceSteps, chunkSteps = NCCL_STEPS / 2: a ring step is 2 Simple slices.
constexpr int kRingSlicesPerStep = 2;

// The real rank's neighbour on the host's rings (rank order): send to self+1, receive from
// self-1.
bool isRingNeighbour(const VirtualConn& c) {
  if (c.nranks < 2 || c.self_rank < 0 || c.self_rank >= c.nranks) return false;
  const int want = c.send ? (c.self_rank + 1) % c.nranks : (c.self_rank - 1 + c.nranks) % c.nranks;
  return c.peer_rank == want;
}

bool isRingConn(const VirtualConn& c) {
  // Ring peers: exchange distance 1.
  return c.graph == live::kGraphRing && c.distance == 1 && isRingNeighbour(c);
}

bool isTreeConn(const VirtualConn& c) {
  return c.graph == live::kGraphTree && c.nranks >= 2 && c.self_rank >= 0 && c.peer_rank >= 0;
}

// The link a peer-ready transfer between the real rank and c's peer takes, and its port: the
// target's NVLink inside their node, else the real rank's NIC (`net`: which NET parameters).
struct ReadyLink {
  live::LinkParams params;
  std::shared_ptr<live::PortQueue> port;
  std::shared_ptr<live::PortQueue> proxy;  // NET only: the target's NVLink needs no proxy
};
ReadyLink readyLink(PluginState& st, const live::CommLinks& links, const VirtualConn& c,
                    const live::LinkParams& net) {
  if (links.sameNode(c.self_rank, c.peer_rank))
    return {links.nvl, c.send ? st.nvlOut() : st.nvlIn(), nullptr};
  return {net, c.send ? st.ownNicOut() : st.ownNicIn(), st.proxy()};
}
}  // namespace

const live::CommLinks& NetContext::linksFor(int nranks) {
  auto l = links_.find(nranks);
  if (l == links_.end()) {
    const PluginState& st = PluginState::get();
    l = links_.emplace(nranks, live::commLinks(st.model(), st.config().cluster, nranks)).first;
  }
  return l->second;
}

NetContext::RingPlan& NetContext::planFor(const VirtualConn& c) {
  // A v11 context belongs to one communicator (its commId); the default context (v8..v10)
  // may hold several, told apart by the comm id the host wrote.
  const std::uint64_t comm = comm_id != 0 ? comm_id : c.comm_id;
  auto [it, fresh] = plans_.try_emplace({comm, c.self_rank});
  RingPlan& p = it->second;
  if (!fresh) return p;
  p.links = linksFor(c.nranks);
  const int ppn = p.links.shape.ranks_per_node;
  p.period = p.links.shape.nnodes > 1 ? ppn : 1;
  p.position = c.self_rank % ppn;
  CRYSTAL_INFO("comm {:#x}: real rank {} of {} at ring position {} of a {}-member node period "
               "({} nodes); ring channel share of NVLink {:.1f} GB/s + {} ns, of the NET "
               "{:.1f} GB/s (one channel <= {:.1f} GB/s) + {} ns",
               comm, c.self_rank, c.nranks, p.position, p.period, p.links.shape.nnodes,
               1.0 / p.links.ring_nvl.link_ns_per_byte, p.links.ring_nvl.latency_ns,
               1.0 / p.links.ring_net.link_ns_per_byte, 1.0 / p.links.ring_net.one_ns_per_byte,
               p.links.ring_net.latency_ns);
  return p;
}

std::shared_ptr<live::RingChannel> makeRingChannel(const live::CommLinks& links, int self_rank,
                                                   std::shared_ptr<std::atomic<int>> busy,
                                                   std::shared_ptr<std::atomic<int>> connected) {
  const int ppn = std::max(1, links.shape.ranks_per_node);
  const bool multi = links.shape.nnodes > 1;
  const int period = multi ? ppn : 1;
  const int position = self_rank % ppn;
  // Position x of a node sends over the NET iff it is the node's last and the ring spans nodes.
  auto hopOf = [&](int x, std::size_t proto) {
    return multi && x % ppn == ppn - 1 ? links.ring_net_by[proto] : links.ring_nvl_by[proto];
  };
  auto chainOf = [&](std::size_t proto) {
    std::vector<live::RingHop> chain;
    for (int j = 0; j < period; ++j) chain.push_back(hopOf(position + j, proto));
    return chain;
  };
  // period 1: the previous member is a copy of the real rank, over the same kind of link.
  constexpr auto kSimple = static_cast<std::size_t>(model::Proto::Simple);
  auto ch = std::make_shared<live::RingChannel>(chainOf(kSimple), hopOf(position - 1 + ppn, kSimple),
                                                kRingSlicesPerStep, std::move(busy),
                                                std::move(connected));
  for (const model::Proto proto : {model::Proto::LL, model::Proto::LL128}) {
    const auto i = static_cast<std::size_t>(proto);
    ch->setProtocolHops(static_cast<int>(i), chainOf(i), hopOf(position - 1 + ppn, i));
  }
  for (std::size_t i = 0; i < links.chain_cost_by.size(); ++i)
    ch->setChainOpCost(static_cast<int>(i), links.chain_cost_by[i]);
  return ch;
}

std::shared_ptr<live::RingChannel> NetContext::makeChannel(RingPlan& p) {
  return makeRingChannel(p.links, p.position, p.busy, p.connected);
}

std::shared_ptr<live::VirtualLink> NetContext::virtualLink(const VirtualConn& c, int dev) {
  // The identity comes from the host over the wire: a bad one fails the connection, clearly.
  constexpr int kMaxRanks = 1 << 24;
  if (c.nranks < 0 || c.nranks > kMaxRanks || c.self_rank >= std::max(c.nranks, 1) ||
      c.peer_rank >= std::max(c.nranks, 1) || c.distance < 0 || c.distance >= kMaxRanks)
    throw PluginError(Errc::BadArgument,
                      fmt::format("{} to virtual rank {}: connection identity out of range "
                                  "(real rank {}, nranks {}, distance {}; handle/Hello v{})",
                                  c.send ? "send" : "receive", c.peer_rank, c.self_rank,
                                  c.nranks, c.distance, live::kWireVersion));
  std::lock_guard lock(mu);
  PluginState& st = PluginState::get();
  if (isRingConn(c)) {
    RingPlan& p = planFor(c);
    RingPlan::Channel& ch = p.channels[c.ordinal];
    bool& side = c.send ? ch.has_send : ch.has_recv;
    // A second exchange of the same ring (runtime connect of more channels) numbers its
    // entries from 0 again: the same ordinal on the same side is a new channel.
    if (!ch.ring || side) {
      p.connected->fetch_add(1, std::memory_order_relaxed);
      ch = RingPlan::Channel{makeChannel(p)};
    }
    (c.send ? ch.has_send : ch.has_recv) = true;
    // Transfers of other operations on this connection (a tree whose chain runs through
    // the same neighbour, op_segments.h) are timed peer-ready on the link they would use.
    ReadyLink r = readyLink(st, p.links, c, p.links.net);
    return std::make_shared<live::VirtualLink>(ch.ring, r.params, std::move(r.port),
                                               std::move(r.proxy));
  }
  if (isTreeConn(c)) {
    // A tree neighbour: the model's tree all-reduce for the real rank's place in the target
    // tree; the tuner's record of each collective (same commId) gives chunk and channels.
    if (auto l = treeFor(c).link(c.send, c.peer_rank, c.ordinal)) {
      // A ring that connects after the tree reuses the connection to its neighbour
      // (opSegmentsFor): its transfers are timed peer-ready on the link they would use.
      const live::CommLinks& links = linksFor(c.nranks);
      ReadyLink r = readyLink(st, links, c, links.net);
      l->setPeerReady(r.params, std::move(r.port), std::move(r.proxy));
      return l;
    }
  }
  if (c.graph == live::kGraphRing && !ring_warned_) {
    ring_warned_ = true;  // once per context: NCCL's ring is not in rank order
    CRYSTAL_INFO("ring connection of rank {} {} rank {} (distance {}, {} ranks) is not a "
                 "rank-order neighbour: timed with the peer-ready rule, not the ring's",
                 c.self_rank, c.send ? "to" : "from", c.peer_rank, c.distance, c.nranks);
  }
  // Any other connection: the peer is taken as ready; NVLink inside the target node. A peer
  // that did not say who it is gets the world's NIC link.
  NicInfo& n = st.nic(dev);
  if (c.nranks < 2 || c.self_rank < 0 || c.peer_rank < 0)
    return std::make_shared<live::VirtualLink>(st.link(), c.send ? n.out : n.in, st.proxy());
  const live::CommLinks& links = linksFor(c.nranks);
  // A p2p channel's virtual sender is a target GPU: it writes chunks at NCCL's p2p pace.
  ReadyLink r = readyLink(st, links, c, c.graph == live::kGraphP2p ? links.net_p2p : links.net);
  return std::make_shared<live::VirtualLink>(r.params, std::move(r.port), std::move(r.proxy));
}

NetContext::RealLink NetContext::realLink(int self_rank, int peer_rank, int nranks, int dev,
                                          bool send) {
  PluginState& st = PluginState::get();
  NicInfo& n = st.nic(dev);
  RealLink out{st.link(), send ? n.out : n.in, false};
  constexpr int kMaxRanks = 1 << 24;  // a peer's Hello is input
  if (nranks < 2 || nranks > kMaxRanks || self_rank < 0 || peer_rank < 0 || self_rank >= nranks ||
      peer_rank >= nranks || self_rank == peer_rank)
    return out;
  std::lock_guard lock(mu);
  const live::CommLinks& links = linksFor(nranks);
  if (!links.sameNode(self_rank, peer_rank)) return out;
  return RealLink{links.nvl, send ? st.nvlOut() : st.nvlIn(), true};
}

std::shared_ptr<MirrorChannel> NetContext::mirrorFor(const VirtualConn& c) {
  std::lock_guard lock(mu);
  if (isRingConn(c)) {
    MirrorPair& p = ring_mirrors_[{c.comm_id, c.self_rank, c.ordinal}];
    bool& side = c.send ? p.has_send : p.has_recv;
    if (side) p = MirrorPair{};  // this side again: a new set-up of the ring channel
    (c.send ? p.has_send : p.has_recv) = true;
    return p.channel;
  }
  if (c.graph != live::kGraphUnknown) return nullptr;  // tree, PAT, p2p: not a mirror pair
  std::size_t& k = c.send ? mirror_sends_ : mirror_recvs_;
  if (k >= mirrors_.size()) mirrors_.push_back(std::make_shared<MirrorChannel>());
  return mirrors_[k++];
}

live::TreeComm& NetContext::treeFor(const VirtualConn& c) {
  const std::uint64_t comm = comm_id != 0 ? comm_id : c.comm_id;
  auto& tree = trees_[{comm, c.self_rank}];
  if (!tree) {
    PluginState& st = PluginState::get();
    tree = std::make_shared<live::TreeComm>(st.model(), st.config().cluster, comm, c.self_rank,
                                            c.nranks);
    if (const int ppn = st.commNodeRanks(comm); ppn > 1) tree->setNodeRanks(ppn);
  }
  if (c.tree_channels > 0) tree->setBaseChannels(c.tree_channels);
  return *tree;
}

std::shared_ptr<OpSegments> NetContext::opSegmentsFor(const VirtualConn& c) {
  const std::uint64_t comm = comm_id != 0 ? comm_id : c.comm_id;
  int channel = -1;
  if (isRingConn(c)) {
    channel = c.ordinal;  // a ring connects every channel: the k-th entry is channel k
  } else if (isTreeConn(c) && isRingNeighbour(c)) {
    // A tree connection that a ring may share (its neighbour on the ring too): its ring
    // operations are told apart by NCCL's channel, when the tree's numbering gives it.
    std::lock_guard lock(mu);
    channel = treeFor(c).ncclChannel(c.send, c.peer_rank, c.ordinal);
  }
  if (channel < 0) return nullptr;
  return PluginState::get().newOpSegments(comm, channel, c.peer_rank, c.send, c.nranks,
                                          c.self_rank);
}

std::shared_ptr<live::RingChannel> NetContext::ringReceiving(std::uint64_t comm, int self_rank,
                                                             int ordinal) {
  std::lock_guard lock(mu);
  if (comm_id != 0 && comm_id != comm) return nullptr;
  const auto p = plans_.find({comm, self_rank});
  if (p == plans_.end()) return nullptr;
  const auto ch = p->second.channels.find(ordinal);
  if (ch == p->second.channels.end() || !ch->second.has_recv) return nullptr;
  return ch->second.ring;
}

std::shared_ptr<live::RingChannel> PluginState::ringReceiving(std::uint64_t comm, int self_rank,
                                                              int ordinal) {
  // Lock order: mu_, then a context's mu (no code under a context's mu takes mu_).
  std::lock_guard lock(mu_);
  if (auto r = default_ctx_.ringReceiving(comm, self_rank, ordinal)) return r;
  for (auto& c : contexts_)
    if (auto r = c.ringReceiving(comm, self_rank, ordinal)) return r;
  return nullptr;
}

PluginState& PluginState::get() {
  // Never destroyed: NCCL's proxy thread and the P2P pacing threads call in until the process
  // is gone, also while exit() runs static destructors (a program that leaves on an NCCL error
  // without destroying its communicators).
  static auto* state = new PluginState;
  return *state;
}

Config loadTargetConfig() {
  Config cfg;
  cfg.source = "<builtin>";
  const std::string path = paramString("CRYSTAL_CONFIG");
  if (!path.empty()) {
#ifdef CRYSTAL_HAVE_CONFIG_LOADER
    cfg = loadConfig(path);
#else
    throw InputError(fmt::format(
        "CRYSTAL_CONFIG={}: this build has no config loader (crystal_graph not built)", path));
#endif
  } else {
    CRYSTAL_INFO("no CRYSTAL_CONFIG: built-in target, {} NICs of {} GB/s, {} us",
                 cfg.cluster.fabric.nics_per_node, cfg.cluster.fabric.nic.bandwidth_GBps,
                 cfg.cluster.fabric.nic.latency_us);
  }
  return cfg;
}

void PluginState::ensureInit() {
  std::lock_guard lock(mu_);
  if (ready_) return;
  const Config cfg = loadTargetConfig();
  applyLocked(cfg);
  const RdmaProbe rdma = probeRdma();
  rdma_ = rdma.devices > 0;
  if (rdma_)
    CRYSTAL_INFO("RDMA device {} found ({} total); real peers still use TCP (RC path not built)",
                 rdma.first, rdma.devices);
  else
    CRYSTAL_INFO("no RDMA device ({}); real peers use TCP on {}",
                 rdma.library ? "libibverbs loaded, 0 devices" : "libibverbs absent",
                 socket_addr_);
  ready_ = true;
}

void PluginState::configure(const Config& cfg) {
  std::lock_guard lock(mu_);
  applyLocked(cfg);
  ready_ = true;
}

void PluginState::applyLocked(const Config& cfg) {
  const auto& fab = cfg.cluster.fabric;
  if (fab.nics_per_node <= 0 || fab.nic.bandwidth_GBps <= 0 || fab.nic.latency_us < 0)
    throw InputError(fmt::format("{}: cluster.fabric: nics_per_node and nic.bandwidth_GBps "
                                 "must be > 0, nic.latency_us >= 0",
                                 cfg.source));
  max_recvs_ = static_cast<int>(paramIntIn("CRYSTAL_MAX_RECVS", 1, 8));
  tuner_ = paramBool("CRYSTAL_TUNER") && cfg.emulation.tuner;
  // Folding spares NCCL's proxy NET work. Under p2p_peers a comm whose rings stay on R's node
  // at R turns it off for itself (setCommRingsOnNode).
  {
    std::lock_guard lock(fold_mu_);
    rings_on_node_.clear();
    node_ranks_.clear();
  }
  fold_rings_env_ = !paramString("CRYSTAL_FOLD_RINGS").empty();
  fold_rings_ = fold_rings_env_ ? paramBool("CRYSTAL_FOLD_RINGS") : cfg.emulation.fold_rings;
  nccl_min_channels_ = 0;  // a reconfigure reads it afresh
  if (const char* min = std::getenv("NCCL_MIN_NCHANNELS"); min != nullptr)
    nccl_min_channels_ = std::clamp(std::atoi(min), 0, 64);  // NCCL 2.28.9 caps at MAXCHANNELS
  shared_clock_ = paramBool("CRYSTAL_SHARED_CLOCK");
  emulation_id_ = static_cast<std::uint64_t>(paramInt("CRYSTAL_EMULATION_ID"));
  socket_addr_ = paramString("CRYSTAL_SOCKET_ADDR");
  const std::string data = paramString("CRYSTAL_DATA");
  data_ = data.empty() ? cfg.emulation.data : parseDataPolicy(data, "environment CRYSTAL_DATA");
  gdr_ = paramString("CRYSTAL_GDR").empty() ? gdrEnabled(cfg.emulation, data_) : paramBool("CRYSTAL_GDR");
  // GDR needs the plugin's GPU stream to run while NCCL's kernel spins for its writes. With
  // CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM sets it) every stream shares one hardware
  // queue, served in submission order: the writes would wait behind the NCCL kernels queued
  // before them, which wait for the writes (docs/plugin.md "One stream, and why").
  if (const char* conns = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
      gdr_ && conns != nullptr && std::atoi(conns) == 1) {
    gdr_ = false;
    CRYSTAL_WARN("CUDA_DEVICE_MAX_CONNECTIONS=1: the plugin's writes into GPU buffers would "
                 "queue behind the NCCL kernels that wait for them (a hang); NET buffers stay "
                 "in host memory (GDR off)");
  }
  cfg_ = cfg;
  model_ = live::makeTargetModel(cfg_);
  link_ = live::linkParams(*model_, cfg_.cluster);
  nics_.clear();
  for (int i = 0; i < fab.nics_per_node; ++i) {
    NicInfo n;
    n.name = fmt::format("crystal{}", i);
    n.speed_mbps = static_cast<int>(fab.nic.bandwidth_GBps * 8000.0 + 0.5);  // GB/s -> Mb/s
    n.latency_us = static_cast<float>(link_.latency_ns / 1e3);
    n.guid = 0x4352590000000000ull | static_cast<std::uint64_t>(i);
    nics_.push_back(std::move(n));
  }
  CRYSTAL_INFO("target model: {}; link {} ns + {:.4f} ns/B; maxRecvs {}; tuner {}; data {}; "
               "gdr {}",
               model_->name(), link_.latency_ns, link_.ns_per_byte, max_recvs_,
               tuner_ ? "on" : "off", dataPolicyName(data_), gdr_ ? "on (HOST|CUDA)" : "off (HOST)");
}

NicInfo& PluginState::nic(int dev) {
  if (dev < 0 || dev >= ndev())
    throw PluginError(Errc::BadArgument, fmt::format("device {} out of range 0..{}", dev, ndev() - 1));
  return nics_[static_cast<std::size_t>(dev)];
}

NetContext* PluginState::newContext(std::uint64_t comm_id) {
  std::lock_guard lock(mu_);
  auto& c = contexts_.emplace_back();
  c.comm_id = comm_id;
  return &c;
}

void PluginState::dropContext(NetContext* ctx) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(contexts_.begin(), contexts_.end(), [&](auto& c) { return &c == ctx; });
  if (it == contexts_.end()) throw PluginError(Errc::BadUsage, "finalize: unknown context");
  contexts_.erase(it);
}

NetContext* PluginState::checkContext(void* ctx) {
  if (ctx == nullptr) return &default_ctx_;
  std::lock_guard lock(mu_);
  for (auto& c : contexts_)
    if (&c == ctx) return &c;
  if (ctx == &default_ctx_) return &default_ctx_;
  throw PluginError(Errc::BadUsage, "unknown net context (used after finalize?)");
}

std::shared_ptr<OpSegments> PluginState::newOpSegments(std::uint64_t comm, int channel, int peer,
                                                       bool send, int nranks, int self_rank) {
  auto ops = std::make_shared<OpSegments>(nranks, self_rank);
  std::lock_guard lock(ops_mu_);
  op_segments_[{comm, channel, peer, send}] = ops;
  if (!feedsProxyOps(comm)) {
    // The first free entry (never freed: a comm's id is not reused in a process); no id (0)
    // or no entry left: every comm is taken as fed.
    bool placed = false;
    for (auto& e : fed_comms_) {
      if (comm == 0 || e.load(std::memory_order_relaxed) != 0) continue;
      e.store(comm, std::memory_order_release);
      placed = true;
      break;
    }
    if (!placed) fed_many_.store(true, std::memory_order_release);
  }
  return ops;
}

bool PluginState::feedsProxyOps(std::uint64_t comm) const noexcept {
  if (fed_many_.load(std::memory_order_acquire)) return true;
  for (const auto& e : fed_comms_) {
    const std::uint64_t v = e.load(std::memory_order_acquire);
    if (v == 0) return false;  // filled in order: none after a free one
    if (v == comm) return true;
  }
  return false;
}

void PluginState::proxyOpStarted(const profiler::ProxyOpStart& s) {
  // Not under a collective: point-to-point operations run on NCCL's p2p connection to the
  // same (channel, peer), not on the ring's; they must not enter its queue.
  if (s.op == 0) return;
  std::shared_ptr<OpSegments> ops;
  bool bytes_free = false;
  {
    std::lock_guard lock(ops_mu_);
    bytes_free = s.rewritable && rewritten_.count(s.comm) != 0;
    const auto it = op_segments_.find({s.comm, s.channel, s.peer, s.send});
    if (it == op_segments_.end()) return;
    ops = it->second.lock();
    if (!ops) {
      op_segments_.erase(it);  // its connection was closed
      return;
    }
  }
  ops->push(s.op, s.transfers, s.ring, s.allgather, bytes_free, s.channels,
            {s.chain_root, s.chain_reduce, s.coll_bytes, s.chunk_bytes, s.issued_ns});
}

void PluginState::setResultsRewritten(std::uint64_t comm, bool on) {
  std::lock_guard lock(ops_mu_);
  if (on)
    rewritten_.insert(comm);
  else
    rewritten_.erase(comm);
}

bool PluginState::resultsRewritten(std::uint64_t comm) const {
  std::lock_guard lock(ops_mu_);
  return rewritten_.count(comm) != 0;
}

void PluginState::setCommRank(std::uint64_t comm, int rank, int nranks) {
  if (comm == 0 || rank < 0 || nranks < 1 || rank >= nranks) return;
  std::lock_guard lock(ops_mu_);
  comm_ranks_[comm] = CommRank{rank, nranks};
}

PluginState::CommRank PluginState::commRank(std::uint64_t comm) const {
  std::lock_guard lock(ops_mu_);
  auto it = comm_ranks_.find(comm);
  return it != comm_ranks_.end() ? it->second : CommRank{};
}

bool PluginState::foldRings(std::uint64_t comm) const {
  if (fold_rings_env_) return fold_rings_;
  return fold_rings_ && !ringsOnNode(comm);
}

void PluginState::setCommRingsOnNode(std::uint64_t comm) {
  std::lock_guard lock(fold_mu_);
  rings_on_node_.insert(comm);
}

bool PluginState::ringsOnNode(std::uint64_t comm) const {
  std::lock_guard lock(fold_mu_);
  return rings_on_node_.contains(comm);
}

void PluginState::setCommNodeRanks(std::uint64_t comm, int ranks) {
  std::lock_guard lock(fold_mu_);
  node_ranks_[comm] = ranks;
}

int PluginState::commNodeRanks(std::uint64_t comm) const {
  std::lock_guard lock(fold_mu_);
  const auto it = node_ranks_.find(comm);
  return it == node_ranks_.end() ? 0 : it->second;
}

}  // namespace crystal::plugin
