// Graphs and cost models for engine tests, written by hand so each expected time can be
// worked out on paper.
//   TinyGraph   explicit communicators and per-rank op lists
//   LayoutGraph tp x dp x pp job by formula (any world size, O(1) memory per rank),
//               classes = pipeline stages; also used by bench/engine
//   FakeCost    closed-form costs
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "crystal/graph/graph.h"
#include "crystal/replay/cost_model.h"

namespace crystal::replay::testing {

using graph::CollKind;
using graph::Op;
using graph::OpKind;

inline Op compute(double us, std::uint8_t stream = 0) {
  Op o;
  o.kind = OpKind::Compute;
  o.stream = stream;
  o.duration_us = us;
  return o;
}
inline Op coll(CollKind k, std::int32_t comm, std::uint64_t bytes, std::uint8_t stream = 0) {
  Op o;
  o.kind = OpKind::Collective;
  o.coll = k;
  o.comm = comm;
  o.bytes = bytes;
  o.stream = stream;
  return o;
}
inline Op p2p(OpKind k, std::int32_t comm, std::int32_t peer, std::uint32_t tag,
              std::uint64_t bytes, std::uint8_t stream = 0) {
  Op o;
  o.kind = k;
  o.comm = comm;
  o.peer = peer;
  o.tag = tag;
  o.bytes = bytes;
  o.stream = stream;
  return o;
}
inline Op simple(OpKind k, std::uint32_t tag = 0, std::uint8_t stream = 0,
                 std::uint64_t bytes = 0) {
  Op o;
  o.kind = k;
  o.tag = tag;
  o.stream = stream;
  o.bytes = bytes;
  return o;
}

// Collective: 10 us + 1 ns/byte. P2P: 2 us + 1 ns/byte across nodes, 1 us + 0.1 ns/byte
// inside a node. Channels report the member count so tests can see the shape passed in.
class FakeCost final : public CostModel {
 public:
  model::Choice collective(model::Func, std::uint64_t bytes,
                           const model::CommShape& s) const override {
    ++calls;
    return model::Choice{model::Algo::Ring, model::Proto::Simple, s.nnodes,
                         10.0 + static_cast<double>(bytes) * 1e-3};
  }
  double p2pUs(std::uint64_t bytes, bool same_node) const override {
    return same_node ? 1.0 + static_cast<double>(bytes) * 1e-4
                     : 2.0 + static_cast<double>(bytes) * 1e-3;
  }
  mutable int calls = 0;
};

class TinyGraph final : public graph::Graph, public graph::CommTable {
 public:
  explicit TinyGraph(std::int32_t world, int gpus_per_node = 8)
      : streams_(static_cast<std::size_t>(world)), class_(static_cast<std::size_t>(world)) {
    cfg_.cluster.gpus_per_node = gpus_per_node;
    cfg_.cluster.nodes = (world + gpus_per_node - 1) / gpus_per_node;
    for (std::int32_t r = 0; r < world; ++r) class_[static_cast<std::size_t>(r)] = r;
    classes_ = world;
  }
  std::int32_t addComm(std::string family, std::vector<std::int32_t> members) {
    comms_.push_back({std::move(family), std::move(members)});
    return static_cast<std::int32_t>(comms_.size() - 1);
  }
  std::vector<Op>& ops(std::int32_t rank) { return streams_[static_cast<std::size_t>(rank)]; }
  void setClasses(std::vector<std::int32_t> cls, std::int32_t n) {
    class_ = std::move(cls);
    classes_ = n;
  }

  const Config& config() const override { return cfg_; }
  std::int32_t worldSize() const override { return static_cast<std::int32_t>(streams_.size()); }
  const graph::CommTable& comms() const override { return *this; }
  std::int32_t numClasses() const override { return classes_; }
  std::int32_t classOf(std::int32_t r) const override {
    return class_[static_cast<std::size_t>(r)];
  }
  std::int32_t representative(std::int32_t c) const override {
    for (std::size_t r = 0; r < class_.size(); ++r)
      if (class_[r] == c) return static_cast<std::int32_t>(r);
    return -1;
  }
  std::int64_t classSize(std::int32_t c) const override {
    std::int64_t n = 0;
    for (std::int32_t k : class_) n += k == c;
    return n;
  }
  void materialize(std::int32_t r, std::vector<Op>& out) const override {
    out = streams_[static_cast<std::size_t>(r)];
  }
  std::size_t opCount(std::int32_t r) const override {
    return streams_[static_cast<std::size_t>(r)].size();
  }
  std::uint64_t totalOps() const override {
    std::uint64_t n = 0;
    for (const auto& s : streams_) n += s.size();
    return n;
  }
  std::string_view name(std::uint32_t) const override { return {}; }

  std::int32_t count() const override { return static_cast<std::int32_t>(comms_.size()); }
  graph::CommInfo info(std::int32_t c) const override {
    const auto& e = comms_[static_cast<std::size_t>(c)];
    return {c, e.first, static_cast<std::int32_t>(e.second.size())};
  }
  std::int32_t member(std::int32_t c, std::int32_t i) const override {
    return comms_[static_cast<std::size_t>(c)].second[static_cast<std::size_t>(i)];
  }
  std::int32_t indexOf(std::int32_t c, std::int32_t rank) const override {
    const auto& m = comms_[static_cast<std::size_t>(c)].second;
    for (std::size_t i = 0; i < m.size(); ++i)
      if (m[i] == rank) return static_cast<std::int32_t>(i);
    return -1;
  }
  std::int32_t commOf(std::string_view family, std::int32_t rank) const override {
    for (std::size_t c = 0; c < comms_.size(); ++c)
      if (comms_[c].first == family && indexOf(static_cast<std::int32_t>(c), rank) >= 0)
        return static_cast<std::int32_t>(c);
    return -1;
  }

 private:
  Config cfg_;
  std::vector<std::vector<Op>> streams_;
  std::vector<std::int32_t> class_;
  std::int32_t classes_ = 0;
  std::vector<std::pair<std::string, std::vector<std::int32_t>>> comms_;
};

// tp x dp x pp job, rank = t + tp*(d + dp*p). Per iteration, stage p runs `micro` forward
// micro-batches (recv activations from p-1, compute, TP all-reduce, send to p+1), then as
// many backward ones in reverse direction, then the DP gradient all-reduce on stream 1
// (ordered after backward by Record/Wait) and, if `world_barrier`, a world all-reduce.
// Stage p's compute takes (1 + p/10) of the base so classes differ. Classes = stages.
class LayoutGraph final : public graph::Graph, public graph::CommTable {
 public:
  struct Shape {
    int tp = 2, dp = 2, pp = 2, micro = 4;
    int gpus_per_node = 8;
    double fwd_us = 100, bwd_us = 200;
    std::uint64_t tp_bytes = 1 << 20, pp_bytes = 1 << 22, dp_bytes = 1 << 26;
    bool world_barrier = false;
  };
  explicit LayoutGraph(Shape s) : s_(s) {
    cfg_.cluster.gpus_per_node = s.gpus_per_node;
    cfg_.cluster.nodes = (world() + s.gpus_per_node - 1) / s.gpus_per_node;
  }
  std::int32_t world() const { return s_.tp * s_.dp * s_.pp; }

  const Config& config() const override { return cfg_; }
  std::int32_t worldSize() const override { return world(); }
  const graph::CommTable& comms() const override { return *this; }
  std::int32_t numClasses() const override { return s_.pp; }
  std::int32_t classOf(std::int32_t r) const override { return r / (s_.tp * s_.dp); }
  std::int32_t representative(std::int32_t c) const override { return c * s_.tp * s_.dp; }
  std::int64_t classSize(std::int32_t) const override { return s_.tp * s_.dp; }
  void materialize(std::int32_t r, std::vector<Op>& out) const override {
    out.clear();
    const int t = r % s_.tp, d = (r / s_.tp) % s_.dp, p = r / (s_.tp * s_.dp);
    const std::int32_t tpc = tpComm(d, p), ppc = ppComm(t, d), dpc = dpComm(t, p);
    const double f = 1.0 + p / 10.0;
    out.push_back(simple(OpKind::Alloc, 0, 0, 1000));
    for (int m = 0; m < s_.micro; ++m) {
      if (p > 0) out.push_back(p2p(OpKind::Recv, ppc, rankOf(t, d, p - 1), m, s_.pp_bytes));
      out.push_back(compute(s_.fwd_us * f));
      out.push_back(simple(OpKind::Alloc, 0, 0, 100));
      if (s_.tp > 1) out.push_back(coll(CollKind::AllReduce, tpc, s_.tp_bytes));
      if (p + 1 < s_.pp) out.push_back(p2p(OpKind::Send, ppc, rankOf(t, d, p + 1), m, s_.pp_bytes));
    }
    for (int m = 0; m < s_.micro; ++m) {
      if (p + 1 < s_.pp) out.push_back(p2p(OpKind::Recv, ppc, rankOf(t, d, p + 1), m, s_.pp_bytes));
      out.push_back(compute(s_.bwd_us * f));
      out.push_back(simple(OpKind::Free, 0, 0, 100));
      if (s_.tp > 1) out.push_back(coll(CollKind::AllReduce, tpc, s_.tp_bytes));
      if (p > 0) out.push_back(p2p(OpKind::Send, ppc, rankOf(t, d, p - 1), m, s_.pp_bytes));
    }
    out.push_back(simple(OpKind::Record, 1, 0));
    out.push_back(simple(OpKind::Wait, 1, 1));
    if (s_.dp > 1) out.push_back(coll(CollKind::AllReduce, dpc, s_.dp_bytes, 1));
    if (s_.world_barrier) out.push_back(coll(CollKind::AllReduce, worldComm(), 8, 1));
    out.push_back(simple(OpKind::Free, 0, 0, 1000));
  }
  std::size_t opCount(std::int32_t r) const override {
    std::vector<Op> v;
    materialize(r, v);
    return v.size();
  }
  std::uint64_t totalOps() const override {
    std::uint64_t n = 0;
    for (int p = 0; p < s_.pp; ++p)
      n += opCount(representative(p)) * static_cast<std::uint64_t>(classSize(p));
    return n;
  }
  std::string_view name(std::uint32_t) const override { return {}; }

  // Communicators: [tp: dp*pp][dp: tp*pp][pp: tp*dp][world].
  std::int32_t count() const override { return s_.dp * s_.pp + s_.tp * s_.pp + s_.tp * s_.dp + 1; }
  graph::CommInfo info(std::int32_t c) const override {
    if (c < s_.dp * s_.pp) return {c, "tp", s_.tp};
    c -= s_.dp * s_.pp;
    if (c < s_.tp * s_.pp) return {c, "dp", s_.dp};
    c -= s_.tp * s_.pp;
    if (c < s_.tp * s_.dp) return {c, "pp", s_.pp};
    return {c, "world", world()};
  }
  std::int32_t member(std::int32_t c, std::int32_t i) const override {
    if (c < s_.dp * s_.pp) return rankOf(i, c % s_.dp, c / s_.dp);
    c -= s_.dp * s_.pp;
    if (c < s_.tp * s_.pp) return rankOf(c % s_.tp, i, c / s_.tp);
    c -= s_.tp * s_.pp;
    if (c < s_.tp * s_.dp) return rankOf(c % s_.tp, c / s_.tp, i);
    return i;
  }
  std::int32_t indexOf(std::int32_t c, std::int32_t r) const override {
    const int t = r % s_.tp, d = (r / s_.tp) % s_.dp, p = r / (s_.tp * s_.dp);
    if (c < s_.dp * s_.pp) return c == tpComm(d, p) ? t : -1;
    if (c < s_.dp * s_.pp + s_.tp * s_.pp) return c == dpComm(t, p) ? d : -1;
    if (c < count() - 1) return c == ppComm(t, d) ? p : -1;
    return r;
  }
  std::int32_t commOf(std::string_view family, std::int32_t r) const override {
    const int t = r % s_.tp, d = (r / s_.tp) % s_.dp, p = r / (s_.tp * s_.dp);
    if (family == "tp") return tpComm(d, p);
    if (family == "dp") return dpComm(t, p);
    if (family == "pp") return ppComm(t, d);
    if (family == "world") return worldComm();
    return -1;
  }

 private:
  std::int32_t rankOf(int t, int d, int p) const { return t + s_.tp * (d + s_.dp * p); }
  std::int32_t tpComm(int d, int p) const { return d + s_.dp * p; }
  std::int32_t dpComm(int t, int p) const { return s_.dp * s_.pp + t + s_.tp * p; }
  std::int32_t ppComm(int t, int d) const { return s_.dp * s_.pp + s_.tp * s_.pp + t + s_.tp * d; }
  std::int32_t worldComm() const { return count() - 1; }

  Shape s_;
  Config cfg_;
};

}  // namespace crystal::replay::testing
