// Closed-form target model used when replay/model's NcclModel is not linked: NCCL's ring
// (and tree for all-reduce) over the fabric of a ClusterConfig. Deliberately simple; the
// NcclModel replaces it wherever it exists.
#include <algorithm>
#include <cmath>

#include "crystal/live/target_model.h"

namespace crystal::live {
namespace {

using model::Algo;
using model::Choice;
using model::CommShape;
using model::CostTable;
using model::Func;
using model::Proto;
using model::StepTiming;

// Payload fraction of the wire bytes (LL: 8 of 16 bytes, LL128: 120 of 128) and the extra
// per-step latency of each protocol (flag polling vs proxy round trip), in us.
constexpr double kProtoEfficiency[3] = {0.5, 120.0 / 128.0, 1.0};
constexpr double kProtoStepUs[3] = {0.6, 1.1, 3.0};
constexpr double kPerChannelGBps[3] = {4.0, 16.0, 22.0};  // what one channel can move
constexpr double kLaunchUs = 6.0;

class ClusterTargetModel final : public TargetModel {
 public:
  explicit ClusterTargetModel(const Config& cfg)
      : cluster_(cfg.cluster), max_channels_(cfg.model.max_channels.value_or(32)) {}

  StepTiming netStep(Proto p, int channels) const override {
    const auto& f = cluster_.fabric;
    StepTiming t;
    t.latency_us = f.nic.latency_us + f.switch_latency_us * (2 * f.levels - 1);
    t.bandwidth_GBps = f.nic.bandwidth_GBps * kProtoEfficiency[static_cast<int>(p)] /
                       std::max(1, channels);
    return t;
  }

  StepTiming netStep(Proto p, int channels, const CommShape&) const override {
    return netStep(p, channels);
  }

  StepTiming nvlStep(Proto p, int channels, const CommShape&) const override {
    StepTiming t;
    t.latency_us = cluster_.nvlink.latency_us + kProtoStepUs[static_cast<int>(p)];
    t.bandwidth_GBps = cluster_.nvlink.bandwidth_GBps * kProtoEfficiency[static_cast<int>(p)] /
                       std::max(1, channels);
    return t;
  }

  // The closed form has no separate tree figures: a tree step is a ring step.
  StepTiming treeNetStep(Proto p, int channels, const CommShape& s) const override {
    return netStep(p, channels, s);
  }
  StepTiming treeNvlStep(Proto p, int channels, const CommShape& s) const override {
    return nvlStep(p, channels, s);
  }

  CostTable costTable(Func f, std::uint64_t bytes, const CommShape& shape) const override {
    const int ch = chooseChannels(f, bytes, shape, bestAlgoProto(f, bytes, shape));
    CostTable t{};
    for (int a = 0; a < model::kNumAlgos; ++a)
      for (int p = 0; p < model::kNumProtos; ++p)
        t[a][p] = static_cast<float>(time(f, bytes, shape, static_cast<Algo>(a),
                                          static_cast<Proto>(p), ch));
    return t;
  }

  int channels(Func f, std::uint64_t bytes, const CommShape& shape, Algo a,
               Proto p) const override {
    return chooseChannels(f, bytes, shape, {a, p});
  }

  Choice choose(Func f, std::uint64_t bytes, const CommShape& shape) const override {
    auto [a, p] = bestAlgoProto(f, bytes, shape);
    Choice c;
    c.algo = a;
    c.proto = p;
    c.channels = chooseChannels(f, bytes, shape, {a, p});
    c.time_us = time(f, bytes, shape, a, p, c.channels);
    return c;
  }

  double opOverheadUs(Algo, Proto) const override { return kLaunchUs; }
  double p2pNetChannelGBps() const override { return 0.0; }  // the NIC's pace
  double netRequestUs() const override { return 0.0; }       // no proxy bound
  // Links only: the stand-in knows no measured kernel.
  model::ChainKernel chainKernel(model::Func, Proto) const override { return {}; }
  const char* name() const override { return "cluster closed form (NcclModel not linked)"; }

 private:
  // Time of one call; negative where NCCL would not use (algo, proto) for it.
  double time(Func f, std::uint64_t bytes, const CommShape& s, Algo a, Proto p, int ch) const {
    const int n = std::max(1, s.nranks);
    if (n == 1) return kLaunchUs;
    const int pi = static_cast<int>(p);
    const bool inter = s.nnodes > 1;
    const double link_GBps =
        inter ? std::min(cluster_.fabric.nic.bandwidth_GBps, cluster_.nvlink.bandwidth_GBps)
              : cluster_.nvlink.bandwidth_GBps;
    const double bw = std::min(link_GBps, ch * kPerChannelGBps[pi]) * kProtoEfficiency[pi];
    const double step_lat = (inter ? netStep(p, ch).latency_us : cluster_.nvlink.latency_us) +
                            kProtoStepUs[pi];
    const double b = static_cast<double>(bytes);
    if (a == Algo::Ring) {
      double steps = n - 1;
      double wire = b * (n - 1) / n;  // bytes each rank sends
      if (f == Func::AllReduce) { steps *= 2; wire *= 2; }
      else if (f == Func::Broadcast || f == Func::Reduce) wire = b;
      else if (f != Func::AllGather && f != Func::ReduceScatter) return -1;
      return kLaunchUs + steps * step_lat + wire / (bw * 1e3);
    }
    if (a == Algo::Tree && f == Func::AllReduce) {
      const double depth = std::ceil(std::log2(std::max(2, s.nnodes))) + s.ranks_per_node - 1;
      return kLaunchUs + 2 * depth * step_lat + 2 * b / (bw * 1e3);
    }
    return -1;
  }

  std::pair<Algo, Proto> bestAlgoProto(Func f, std::uint64_t bytes, const CommShape& s) const {
    std::pair<Algo, Proto> best{Algo::Ring, Proto::Simple};
    double best_t = -1;
    for (Algo a : {Algo::Ring, Algo::Tree})
      for (Proto p : {Proto::LL, Proto::LL128, Proto::Simple}) {
        const double t = time(f, bytes, s, a, p, max_channels_);
        if (t >= 0 && (best_t < 0 || t < best_t)) { best_t = t; best = {a, p}; }
      }
    return best;
  }

  // Fewest channels (powers of two) within 5 % of the time with all channels.
  int chooseChannels(Func f, std::uint64_t bytes, const CommShape& s,
                     std::pair<Algo, Proto> ap) const {
    const double t_max = time(f, bytes, s, ap.first, ap.second, max_channels_);
    for (int c = 1; c < max_channels_; c *= 2)
      if (time(f, bytes, s, ap.first, ap.second, c) <= 1.05 * t_max) return c;
    return max_channels_;
  }

  ClusterConfig cluster_;
  int max_channels_;
};

}  // namespace

std::unique_ptr<TargetModel> makeClusterTargetModel(const Config& cfg) {
  return std::make_unique<ClusterTargetModel>(cfg);
}

namespace {
LinkParams toLink(const StepTiming& st, double line_GBps) {
  double bw = st.bandwidth_GBps;  // GB/s = bytes/ns
  if (line_GBps > 0 && (bw <= 0 || bw > line_GBps)) bw = line_GBps;
  LinkParams lp;
  lp.latency_ns = static_cast<TimeNs>(st.latency_us * 1e3 + 0.5);
  lp.ns_per_byte = bw > 0 ? 1.0 / bw : 0.0;
  return lp;
}
}  // namespace

CommLinks commLinks(const TargetModel& m, const ClusterConfig& cluster, int nranks) {
  CommLinks c;
  c.shape = blockShape(cluster, nranks);
  c.nvl = toLink(m.nvlStep(Proto::Simple, 1, c.shape), cluster.nvlink.bandwidth_GBps);
  // A NET hop exists only between nodes; a single-node communicator still gets the fabric's
  // figures of a two-node one for connections the target would not make (p2p to itself).
  model::CommShape net_shape = c.shape;
  if (net_shape.nnodes < 2) net_shape = model::CommShape{2, 2, 1};
  c.net = toLink(m.netStep(Proto::Simple, 1, net_shape), cluster.fabric.nic.bandwidth_GBps);
  c.net.request_ns = static_cast<TimeNs>(m.netRequestUs() * 1e3 + 0.5);
  c.net_p2p = c.net;
  if (const double pace = m.p2pNetChannelGBps(); pace > 0) c.net_p2p.sender_ns_per_byte = 1.0 / pace;
  // Rail-optimised nodes: each member drives its own share of the node's NICs.
  const int gpn = std::max(1, cluster.gpus_per_node);
  const int nics = std::max(1, cluster.fabric.nics_per_node);
  c.nics_used = std::clamp((nics * c.shape.ranks_per_node + gpn - 1) / gpn, 1, nics);
  // Per-channel figures of many channels, times the channels: the whole link. The model's
  // figures are per data byte; the proxy's sizes are wire bytes (LL/LL128 lines).
  constexpr int kMany = 4096;
  for (const Proto p : {Proto::LL, Proto::LL128, Proto::Simple}) {
    const double wire = p == Proto::LL ? 2.0 : p == Proto::LL128 ? 128.0 / 120.0 : 1.0;
    const StepTiming nvl_step = m.nvlStep(p, 1, c.shape);
    const LinkParams nvl = toLink(nvl_step, cluster.nvlink.bandwidth_GBps);
    const LinkParams net = toLink(m.netStep(p, 1, net_shape), cluster.fabric.nic.bandwidth_GBps);
    const double nvl_all = m.nvlStep(p, kMany, c.shape).bandwidth_GBps * kMany;
    const double net_all = m.netStep(p, kMany, net_shape).bandwidth_GBps * kMany;
    const auto i = static_cast<std::size_t>(p);
    c.chain_cost_by[i] = ChainOpCost{
        static_cast<TimeNs>(m.opOverheadUs(model::Algo::Ring, p) * 1e3 + 0.5),
        m.chainKernel(model::Func::Broadcast, p), m.chainKernel(model::Func::Reduce, p)};
    c.ring_nvl_by[i] =
        RingHop{nvl.latency_ns, (nvl_all > 0 ? 1.0 / nvl_all : nvl.ns_per_byte) / wire, 0.0};
    c.ring_net_by[i] = RingHop{net.latency_ns,
                               (net_all > 0 ? 1.0 / net_all : net.ns_per_byte) / wire,
                               net.ns_per_byte / wire, c.nics_used};
    // The GPU's time per slice: out of the latency, into each unit's occupancy (as the
    // model's ringRun takes it).
    const auto unit = static_cast<TimeNs>(nvl_step.ring_unit_us * 1e3 + 0.5);
    for (RingHop* h : {&c.ring_nvl_by[i], &c.ring_net_by[i]}) {
      h->unit_ns = unit;
      h->latency_ns = std::max<TimeNs>(0, h->latency_ns - unit);
    }
  }
  c.ring_nvl = c.ring_nvl_by[static_cast<std::size_t>(Proto::Simple)];
  c.ring_net = c.ring_net_by[static_cast<std::size_t>(Proto::Simple)];
  return c;
}

LinkParams linkParams(const TargetModel& m, const ClusterConfig& cluster) {
  const auto st = m.netStep(model::Proto::Simple, 1);
  double bw = st.bandwidth_GBps;  // GB/s = bytes/ns
  const double line = cluster.fabric.nic.bandwidth_GBps;
  if (line > 0 && (bw <= 0 || bw > line)) bw = line;
  LinkParams lp;
  lp.latency_ns = static_cast<TimeNs>(st.latency_us * 1e3 + 0.5);
  lp.ns_per_byte = bw > 0 ? 1.0 / bw : 0.0;
  lp.request_ns = static_cast<TimeNs>(m.netRequestUs() * 1e3 + 0.5);
  return lp;
}

}  // namespace crystal::live
