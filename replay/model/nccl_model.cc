// NcclModel: NCCL's choice from its own tuning model (tuning.h), the time of the call from
// the step-level model of how NCCL runs it (steps.h, closed_form.h, pipeline.h).
#include "crystal/model/nccl_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "closed_form.h"
#include "crystal/base/error.h"
#include "model_options.h"
#include "nccl_constants.h"
#include "pipeline.h"
#include "topology.h"
#include "tuning.h"

namespace crystal::model {

struct NcclModel::Impl {
  Topology topo;
  ModelOptions opt;
};

namespace {

// Everything one call needs about its communicator.
struct CommView {
  Placement place;
  CommGraphs graphs;
  Tuning tuning;
};

CommView view(const Topology& topo, const ModelOptions& opt, const CommShape& shape) {
  const Placement pl = topo.place(shape);
  const CommGraphs g = searchGraphs(pl, opt.graph);
  return CommView{pl, g, Tuning(pl, g, opt.tune)};
}

// The smallest power of 2 at least n (NCCL's pow2Up).
int pow2Up(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

bool isP2p(Func f) {
  return f == Func::SendRecv || f == Func::Send || f == Func::Recv || f == Func::AllToAll;
}

double baseLatency(Algo a, Proto p, const ModelOptions& opt) {
  return nccl::kBaseLat[static_cast<int>(a)][static_cast<int>(p)] + opt.kernel_launch_us;
}

enum class Method { ClosedForm, Recurrence };

double stepTime(const CommView& v, const ModelOptions& opt, Func f, std::uint64_t bytes, Algo a,
                Proto p, int channels, Method m) {
  if (v.place.nranks <= 1) return 0.0;
  if (isP2p(f)) return -1.0;
  if (v.tuning.entry(f, a, p).bw_GBps <= 0) return -1.0;
  channels = std::clamp(channels, 1, nccl::kMaxChannels);
  const double base = baseLatency(a, p, opt);
  if (a == Algo::Pat) {
    // The PAT schedule is not modelled step by step; NCCL's own estimate stands in.
    return v.tuning.estimate(f, a, p, bytes) + opt.kernel_launch_us;
  }
  if (a == Algo::Tree) {
    const ChainRun run = treeRun(v.place, p, channels, bytes, opt.step);
    return base + (m == Method::ClosedForm ? chainClosedForm(run) : chainRecurrence(run));
  }
  if (f == Func::Broadcast || f == Func::Reduce) {
    const ChainRun run = chainRun(v.place, p, channels, bytes, opt.step);
    return base + (m == Method::ClosedForm ? chainClosedForm(run) : chainRecurrence(run));
  }
  const RingRun run = ringRun(v.place, f, p, channels, bytes, opt.step);
  return base + (m == Method::ClosedForm ? ringClosedForm(run) : ringRecurrence(run));
}

// NCCL 2.28.9's channels for one NET peer (graph/paths.cc ncclTopoGetNchannels): 2, halved
// while 2 x nranks exceeds 4 x the communicator's p2p channels, at least the NICs the GPU
// needs (one per GPU when the node has a NIC per GPU or fewer).
int netChannelsPerPeer(int nranks, int comm_channels, const ClusterConfig& cluster) {
  int n = 2;
  while (n * nranks > comm_channels * 4 && n > 1) n /= 2;
  const int nics_per_gpu =
      std::max(1, cluster.fabric.nics_per_node / std::max(1, cluster.gpus_per_node));
  return std::max(nics_per_gpu, n);
}

// The NET transfers (isend or irecv calls) of one direction of one peer's p2p operation of
// `bytes` in NCCL 2.28.9 (enqueue.cc addP2pToPlan, the proxy's nsteps per part): the chunk
// is NCCL_P2P_NET_CHUNKSIZE, a quarter of it below one chunk of bytes and half below 8; the
// bytes go on as few of the peer's channels as keep a part within a chunk (at least
// `min_channels`: all channels used once when the ranks are fewer), each part in chunks.
int p2pNetTransfers(std::uint64_t bytes, int nranks, int per_peer, int p2p_channels) {
  const std::int64_t step = nccl::kP2pNetChunk;
  const auto b = static_cast<std::int64_t>(bytes);
  const std::int64_t chunk = b < step ? step / 4 : b < 8 * step ? step / 2 : step;
  int min_channels = std::max(1, per_peer);
  while (min_channels * nranks > p2p_channels && min_channels > 1) min_channels /= 2;
  if (b == 0) return 1;
  const std::int64_t min_part = step / 2;
  int channels =
      static_cast<int>(std::min<std::int64_t>(min_channels, (b + min_part - 1) / min_part));
  std::int64_t part = std::max(min_part, (b + channels - 1) / channels);
  while (part > step && channels <= per_peer / 2) {
    channels *= 2;
    part = (b + channels - 1) / channels;
  }
  const std::int64_t per_channel = (b + channels - 1) / channels;
  return channels * static_cast<int>((per_channel + chunk - 1) / chunk);
}

// One NET or NVLink transfer of `bytes` in P2P chunks (Simple protocol). A NET transfer runs
// on `peer_channels` channels, each at most StepOptions::p2p_net_channel_GBps.
double p2pOver(const Placement& pl, const ModelOptions& opt, std::uint64_t bytes,
               int peer_channels) {
  const HopPair h = hopTiming(pl, Algo::Ring, Proto::Simple, 1, opt.step);
  const bool net = pl.multiNode();
  ChainRun c;
  c.net_hops = net ? 1 : 0;
  c.nvl_hops = net ? 0 : 1;
  c.nvl = h.nvl;
  c.net = h.net;
  // GPU-paced (the channels' pace below the NIC's): the units go at that pace, and the
  // first one also crosses the wire before the receiver can drain it.
  double wire_us = 0;
  if (net && opt.step.p2p_net_channel_GBps > 0) {
    const double cap_us_per_byte = 1.0 / (peer_channels * opt.step.p2p_net_channel_GBps * 1e3);
    if (cap_us_per_byte > c.net.us_per_byte) {
      wire_us =
          h.net.tx(std::min(static_cast<double>(bytes), static_cast<double>(nccl::kP2pNetChunk)));
      c.net.us_per_byte = cap_us_per_byte;
    }
  }
  const double chunk = static_cast<double>(net ? nccl::kP2pNetChunk : nccl::kP2pNvlChunk);
  c.units = std::max<long>(1, static_cast<long>(std::ceil(static_cast<double>(bytes) / chunk)));
  c.unit_bytes = static_cast<double>(bytes) / c.units;
  return baseLatency(Algo::Ring, Proto::Simple, opt) + chainClosedForm(c) + wire_us;
}

// One hop of algorithm `a` on `shape`'s placement (NET or NVLink) as the live timing's
// per-step latency and bandwidth.
StepTiming hopStep(const Topology& topo, const ModelOptions& opt, const CommShape& shape, Algo a,
                   Proto p, int channels, bool net) {
  const Placement pl = topo.place(shape);
  const HopPair t = hopTiming(pl, a, p, std::max(1, channels), opt.step);
  const Hop& h = net ? t.net : t.nvl;
  const bool ring_unit = a == Algo::Ring && p == Proto::Simple;
  return StepTiming{h.alpha_us, 1.0 / (h.us_per_byte * 1e3),
                    ring_unit ? opt.step.ring_slice_us : 0.0};
}

// The member kernel's floor: measured for Simple only; a reduce's (recvReduceSend) is not
// a broadcast's (recvCopySend).
ChainKernel chainKernelOf(const ModelOptions& opt, Func f, Proto p) {
  if (p != Proto::Simple) return {};
  return f == Func::Reduce ? opt.step.chain_reduce : opt.step.chain_broadcast;
}

// A ring broadcast or reduce is a chain through the ring order: broadcast from `root`, reduce
// from root + 1 to `root`. `iters` of them back to back (nccl-tests' loop: one event before
// the first, one after the last) are one pipeline of iters x units chunks per channel, as a
// member starts the next operation's chunks once its kernel ended the last one's, so the
// chain's fill is paid once, not per operation. Per operation, at the member `rank` (< 0: the
// chain's last, the slowest):
//  - a member past the head receives the last chunk after the hops before it and every
//    chunk at the slowest hop's pace (the closed form's lock-step: finite buffers hold each
//    member back to that hop), but an operation no sooner than the slowest member before it
//    ran its last (each runs its operations one after the other: its fixed cost and its
//    chunks over the slower of its links, or its kernel, below), and runs no faster than
//    that own work itself, which the chain's slack hides otherwise;
//  - the head only sends. NCCL's sender waits for a free slot of the next member's
//    NCCL_STEPS-slot window (that member frees a slot once it forwarded its chunk) and not
//    for anything after its last chunk crossed its link, so it ends a window ahead of the
//    chain, no sooner than its own chunks cross its link. Measured with the real rank as the
//    root of 64 on the H200 (20 back to back, 64 MiB-1 GiB; tests/gpu/hybrid/README.md,
//    seventeenth session): 17-19 us an operation under one operation at rank 1, this 15.6.
// Neither runs faster than its own kernel with peers that never make it wait
// (StepOptions::chain_broadcast, chain_reduce): up to ~16 MiB on 16 channels that kernel,
// not the links, sets the pace.
// iters = 1 is one operation alone (timeAtRank).
double chainLoopAt(const CommView& v, const ModelOptions& opt, Func f, std::uint64_t bytes, Algo a,
                   Proto p, int channels, int rank, int root, int iters) {
  const Placement& pl = v.place;
  const int n = pl.nranks;
  const ChainRun run =
      chainRun(pl, p, std::clamp(channels, 1, nccl::kMaxChannels), bytes, opt.step);
  const int head = f == Func::Reduce ? (root + 1) % n : root;
  const int pos = rank < 0 ? n - 1 : ((rank - head) % n + n) % n;
  const int ppn = std::max(1, pl.ppn);
  // Hop k leaves the member k places after the head; a node's last member sends over the NET.
  auto hop = [&](int k) -> const Hop& {
    const bool net = pl.nnodes > 1 && ((head + k) % n) % ppn == ppn - 1;
    return net ? run.net : run.nvl;
  };
  auto tx = [&](int k) { return hop(k).tx(run.unit_bytes); };
  // Over several nodes at least one node's last member is not the chain's tail (NET hops),
  // and with several GPUs a node the others send over NVLink.
  const double slowest = run.share * std::max(ppn > 1 ? run.nvl.tx(run.unit_bytes) : 0.0,
                                              pl.nnodes > 1 ? run.net.tx(run.unit_bytes) : 0.0);
  const double base = baseLatency(a, p, opt);
  const double units = static_cast<double>(run.units);
  const double all_units = units * iters;
  // A member's own time an operation: its fixed cost and its chunks over the slower of its
  // links, or its kernel with peers that never make it wait (Simple, as measured).
  const ChainKernel kernel = chainKernelOf(opt, f, p);
  auto ownAt = [&](int j) {
    const double link = j == 0 ? tx(0) : std::max(tx(j - 1), j < n - 1 ? tx(j) : 0.0);
    return kernel.memberOpUs(base, units, run.unit_bytes, link);
  };
  if (pos > 0) {
    double fill = 0;
    double upstream = 0;  // the slowest member before `rank`: the chain's pace an operation
    for (int k = 0; k < pos; ++k) {
      fill += hop(k).alpha_us + tx(k);
      upstream = std::max(upstream, ownAt(k));
    }
    const double per_op = std::max(units * slowest, upstream);
    const double chain = base + fill + (units - 1) * slowest + (iters - 1) * per_op;
    return std::max(chain / iters, ownAt(pos));
  }
  // The head: its own chunks at its own link's pace (or its kernel's), or the window's credits.
  const double own = ownAt(0);
  // NCCL_STEPS slots of one step each. A Simple chunk fills a slot; LL and LL128 forward line
  // by line, chainRun's units then being lines of data, a step's data (half of LL's bytes are
  // flags, 1 of LL128's 16 words) holding many.
  const double step = static_cast<double>(nccl::kBuffSize[static_cast<int>(p)]) / nccl::kSteps;
  const double step_data = p == Proto::LL ? step / 2 : p == Proto::LL128 ? step / 16 * 15 : step;
  const double window =
      p == Proto::Simple ? nccl::kSteps : nccl::kSteps * std::floor(step_data / run.unit_bytes);
  if (all_units <= window) return own;
  // The next member frees chunk j's slot once it forwarded it (the chain's last member: once
  // it received it); the head's last chunk needs the slot of the chunk a window before.
  const double forward = n > 2 ? tx(1) : 0.0;
  const double credit = hop(0).alpha_us + tx(0) + (all_units - 1 - window) * slowest + forward;
  return std::max(own, (base + credit + tx(0)) / iters);
}

}  // namespace

CommShape blockShape(const ClusterConfig& cluster, int nranks) {
  CommShape s;
  s.nranks = std::max(1, nranks);
  s.ranks_per_node = std::clamp(cluster.gpus_per_node, 1, s.nranks);
  s.nnodes = (s.nranks + s.ranks_per_node - 1) / s.ranks_per_node;
  return s;
}

NcclModel::NcclModel(const ClusterConfig& cluster, const ModelConfig& model)
    : cluster_(cluster),
      model_(model),
      impl_(
          std::make_shared<const Impl>(Impl{Topology(cluster), readModelOptions(cluster, model)})) {
}

Choice NcclModel::choose(Func f, std::uint64_t bytes, const CommShape& shape) const {
  const CommView v = view(impl_->topo, impl_->opt, shape);
  Choice c;
  if (shape.nranks <= 1) return c;
  if (f == Func::AllToAll) {
    c.time_us = allToAllTime(bytes / static_cast<std::uint64_t>(shape.nranks), shape);
    c.channels = v.graphs.commChannels;
    return c;
  }
  if (isP2p(f)) {
    c.channels = netChannelsPerPeer(shape.nranks, v.graphs.commChannels, cluster_);
    c.time_us = p2pOver(v.place, impl_->opt, bytes, c.channels);
    return c;
  }
  const Tuning::Pick pick = v.tuning.pick(f, bytes);
  if (!pick.ok) {
    throw InputError(std::string("no NCCL algorithm/protocol for ") + std::string(toString(f)) +
                     " on " + std::to_string(shape.nranks) + " ranks");
  }
  c.algo = pick.algo;
  c.proto = pick.proto;
  c.channels = v.tuning.channels(pick.algo, pick.proto, bytes);
  c.time_us = stepTime(v, impl_->opt, f, bytes, c.algo, c.proto, c.channels, Method::ClosedForm);
  return c;
}

int NcclModel::channels(Func /*the entry and the size decide, as in choose*/,
                        std::uint64_t bytes, const CommShape& shape, Algo a, Proto p) const {
  const CommView v = view(impl_->topo, impl_->opt, shape);
  return v.tuning.channels(a, p, bytes);
}

double NcclModel::time(Func f, std::uint64_t bytes, const CommShape& shape, Algo a, Proto p,
                       int channels) const {
  const CommView v = view(impl_->topo, impl_->opt, shape);
  return stepTime(v, impl_->opt, f, bytes, a, p, channels, Method::ClosedForm);
}

double NcclModel::timeAtRank(Func f, std::uint64_t bytes, const CommShape& shape, Algo a,
                             Proto p, int channels, int rank, int root) const {
  const double whole = time(f, bytes, shape, a, p, channels);
  const int n = shape.nranks;
  if (a != Algo::Ring || whole < 0 || n <= 1 || rank < 0 || rank >= n) return whole;
  if (f == Func::AllGather || f == Func::ReduceScatter || f == Func::AllReduce) {
    // Every member arrives at once; `rank` is a class of its own between the others.
    std::vector<StartClass> classes;
    if (rank > 0) classes.push_back({0.0, rank});
    classes.push_back({0.0, 1});
    if (rank + 1 < n) classes.push_back({0.0, n - rank - 1});
    const std::vector<double> finish = ringFinishTimes(f, bytes, shape, p, channels, classes);
    return std::min(whole, finish[rank > 0 ? 1 : 0]);
  }
  if (f != Func::Broadcast && f != Func::Reduce) return whole;
  return chainLoopAt(view(impl_->topo, impl_->opt, shape), impl_->opt, f, bytes, a, p, channels,
                     rank, root, 1);
}

double NcclModel::loopTimeAtRank(Func f, std::uint64_t bytes, const CommShape& shape, Algo a,
                                 Proto p, int channels, int rank, int root, int iters) const {
  const int n = shape.nranks;
  const bool chain = a == Algo::Ring && (f == Func::Broadcast || f == Func::Reduce);
  if (!chain || n <= 1 || iters <= 1 || root < 0 || root >= n) {
    return rank >= 0 ? timeAtRank(f, bytes, shape, a, p, channels, rank, root)
                     : time(f, bytes, shape, a, p, channels);
  }
  const double whole = time(f, bytes, shape, a, p, channels);
  if (whole < 0) return whole;
  return chainLoopAt(view(impl_->topo, impl_->opt, shape), impl_->opt, f, bytes, a, p, channels,
                     rank >= 0 && rank < n ? rank : -1, root, iters);
}

double NcclModel::timeByRecurrence(Func f, std::uint64_t bytes, const CommShape& shape, Algo a,
                                   Proto p, int channels) const {
  const CommView v = view(impl_->topo, impl_->opt, shape);
  return stepTime(v, impl_->opt, f, bytes, a, p, channels, Method::Recurrence);
}

CostTable NcclModel::costTable(Func f, std::uint64_t bytes, const CommShape& shape) const {
  const CommView v = view(impl_->topo, impl_->opt, shape);
  CostTable t{};
  for (auto& row : t) row.fill(-1.0f);
  if (shape.nranks <= 1) {
    t[static_cast<int>(Algo::Ring)][static_cast<int>(Proto::Simple)] = 0.0f;
    return t;
  }
  for (int a = 0; a < kNumAlgos; ++a) {
    for (int p = 0; p < kNumProtos; ++p) {
      t[a][p] = static_cast<float>(
          v.tuning.estimate(f, static_cast<Algo>(a), static_cast<Proto>(p), bytes));
    }
  }
  return t;
}

double NcclModel::p2pTime(std::uint64_t bytes, bool same_node, int comm_nranks) const {
  const CommShape pair = same_node ? CommShape{2, 1, 2} : CommShape{2, 2, 1};
  if (same_node && cluster_.gpus_per_node < 2) {
    throw InputError("p2pTime: same-node transfer on a cluster with 1 GPU per node");
  }
  // The communicator's channels decide how many carry one peer's NET transfer.
  const int n = std::max(2, comm_nranks);
  const int channels =
      same_node ? 1 : netChannelsPerPeer(n, commChannels(blockShape(cluster_, n)), cluster_);
  return p2pOver(impl_->topo.place(pair), impl_->opt, bytes, channels);
}

StepTiming NcclModel::netStep(Proto p, int channels) const {
  return netStep(p, channels, impl_->topo.worldShape());
}

StepTiming NcclModel::netStep(Proto p, int channels, const CommShape& shape) const {
  return hopStep(impl_->topo, impl_->opt, shape, Algo::Ring, p, channels, /*net=*/true);
}

StepTiming NcclModel::nvlStep(Proto p, int channels, const CommShape& shape) const {
  return hopStep(impl_->topo, impl_->opt, shape, Algo::Ring, p, channels, /*net=*/false);
}

StepTiming NcclModel::treeNetStep(Proto p, int channels, const CommShape& shape) const {
  return hopStep(impl_->topo, impl_->opt, shape, Algo::Tree, p, channels, /*net=*/true);
}

StepTiming NcclModel::treeNvlStep(Proto p, int channels, const CommShape& shape) const {
  return hopStep(impl_->topo, impl_->opt, shape, Algo::Tree, p, channels, /*net=*/false);
}

std::string_view NcclModel::whyUnsupported(Func f, const CommShape& shape, Algo a, Proto p) const {
  const CommView v = view(impl_->topo, impl_->opt, shape);
  return v.tuning.entry(f, a, p).reason;
}

double NcclModel::ncclEstimate(Func f, std::uint64_t bytes, const CommShape& shape, Algo a,
                               Proto p) const {
  return view(impl_->topo, impl_->opt, shape).tuning.estimate(f, a, p, bytes);
}

double NcclModel::opOverheadUs(Algo a, Proto p) const { return baseLatency(a, p, impl_->opt); }

double NcclModel::p2pNetChannelGBps() const { return impl_->opt.step.p2p_net_channel_GBps; }

double NcclModel::netRequestUs() const { return impl_->opt.net_request_us; }

ChainKernel NcclModel::chainKernel(Func f, Proto p) const {
  return chainKernelOf(impl_->opt, f, p);
}

int NcclModel::commChannels(const CommShape& shape) const {
  return view(impl_->topo, impl_->opt, shape).graphs.commChannels;
}

std::vector<double> NcclModel::ringFinishTimes(Func f, std::uint64_t bytes, const CommShape& shape,
                                               Proto p, int channels,
                                               std::span<const StartClass> starts) const {
  long total = 0;
  for (const StartClass& s : starts) {
    if (s.count < 1) throw InputError("ringFinishTimes: a start class has count < 1");
    total += s.count;
  }
  if (total != shape.nranks) {
    throw InputError("ringFinishTimes: start classes cover " + std::to_string(total) +
                     " members, communicator has " + std::to_string(shape.nranks));
  }
  if (f != Func::AllReduce && f != Func::AllGather && f != Func::ReduceScatter) {
    throw InputError(std::string("ringFinishTimes: ") + std::string(toString(f)) +
                     " is not a ring collective");
  }
  const CommView v = view(impl_->topo, impl_->opt, shape);
  const RingRun run = ringRun(v.place, f, p, channels, bytes, impl_->opt.step);
  std::vector<double> out = ringFinishByClass(run, shape.nranks, starts);
  const double base = baseLatency(Algo::Ring, p, impl_->opt);
  for (double& t : out) t += base;
  return out;
}

double NcclModel::allToAllHostUs(const CommShape& shape) const {
  if (shape.nranks <= 1) return 0.0;
  return impl_->opt.a2a_group_host_us + impl_->opt.a2a_peer_host_us * shape.nranks;
}

double NcclModel::allToAllTime(std::uint64_t bytes_per_peer, const CommShape& shape) const {
  if (shape.nranks <= 1) return 0.0;
  const CommView v = view(impl_->topo, impl_->opt, shape);
  const Placement& pl = v.place;
  const HopPair h = hopTiming(pl, Algo::Ring, Proto::Simple, 1, impl_->opt.step);
  const double b = static_cast<double>(bytes_per_peer);
  // NVLink peers in the node and NET peers elsewhere proceed in parallel; the NICs of a
  // node are shared by its members (node_net / ppn each).
  const double nvl_us = (pl.ppn - 1) * b * h.nvl.us_per_byte;
  const double net_us =
      pl.multiNode() ? (pl.nranks - pl.ppn) * b / (pl.node_net_GBps / pl.ppn * 1e3) : 0.0;
  // NCCL 2.28.9 runs a channel's p2p work as batches, one after the other, and a batch's
  // peers (up to 8) at once, each with its own warps (common.h, sendrecv.h): the latency is
  // paid once per batch. Rounds come in groups of 8 (NCCL_P2P_SCHEDULE_GROUP_SIZE: one node
  // distance each, init.cc ncclP2pSchedule), a group on `per_peer` channels from its base
  // (channel.h ncclP2pChannelBaseForRound) and in a batch of its own (enqueue.cc); one node:
  // a round per base. The p2p channels are the comm's rounded up to a power of 2
  // (paths.cc ncclTopoComputeP2pChannels), so 64 ranks on 16 channels run one batch each.
  const int p2p_channels = std::min(pow2Up(std::max(1, v.graphs.commChannels)), nccl::kMaxChannels);
  const int per_peer = std::min(
      pow2Up(netChannelsPerPeer(pl.nranks, v.graphs.commChannels, cluster_)), p2p_channels);
  const int group = pl.multiNode() ? std::gcd(8, std::max(1, pl.ppn)) : pl.nranks;
  const int bases = pl.multiNode() ? pl.nranks / group : pl.nranks;
  const double batches = std::ceil(static_cast<double>(bases) * per_peer / p2p_channels);
  const double alpha = pl.multiNode() ? h.net.alpha_us : h.nvl.alpha_us;
  // One proxy thread posts and tests every NET transfer of the rank, both directions: with
  // many NET peers in small chunks it, not the NIC, sets the pace (64 ranks, 4 MiB: 224
  // transfers of 32 KiB, ~2x the NIC's time; emulated on the H200, 2026-12-05).
  const double proxy_us =
      pl.multiNode() ? static_cast<double>(pl.nranks - pl.ppn) * 2.0 *
                           p2pNetTransfers(bytes_per_peer, pl.nranks, per_peer, p2p_channels) *
                           impl_->opt.net_request_us
                     : 0.0;
  return baseLatency(Algo::Ring, Proto::Simple, impl_->opt) + batches * alpha +
         std::max({nvl_us, net_us, proxy_us});
}

}  // namespace crystal::model
