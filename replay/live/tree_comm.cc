#include "crystal/live/tree_comm.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace crystal::live {

namespace {
TreeHop toHop(const model::StepTiming& st) {
  TreeHop h;
  h.latency_ns = static_cast<TimeNs>(st.latency_us * 1e3 + 0.5);
  h.ns_per_byte = st.bandwidth_GBps > 0 ? 1.0 / st.bandwidth_GBps : 0.0;  // GB/s = B/ns
  return h;
}
}  // namespace

TreeComm::TreeComm(const TargetModel& model, const ClusterConfig& cluster, std::uint64_t comm_id,
                   int self, int nranks)
    : shape_(blockShape(cluster, nranks)),
      self_(self),
      nranks_(nranks),
      log_(collectiveLog(comm_id)) {
  // A single-node communicator has no NET hop; keep its figures finite anyway.
  model::CommShape net_shape = shape_;
  if (net_shape.nnodes < 2) net_shape = model::CommShape{2, 2, 1};
  for (int p = 0; p < 3; ++p) {
    overhead_ns_[p] = static_cast<TimeNs>(
        model.opOverheadUs(model::Algo::Tree, static_cast<model::Proto>(p)) * 1e3 + 0.5);
    for (int ch = 1; ch <= kMaxChannels; ++ch)
      hops_[p].emplace_back(toHop(model.treeNvlStep(static_cast<model::Proto>(p), ch, shape_)),
                            toHop(model.treeNetStep(static_cast<model::Proto>(p), ch, net_shape)));
  }
}

std::pair<TreeHop, TreeHop> TreeComm::hops(model::Proto p, int channels) const {
  return hops_[static_cast<int>(p)]
              [static_cast<std::size_t>(std::clamp(channels, 1, kMaxChannels) - 1)];
}

void TreeComm::setBaseChannels(int n) {
  std::lock_guard lock(mu_);
  if (base_ == 0 && n > 0) base_ = n;
}

void TreeComm::setNodeRanks(int ranks) {
  std::lock_guard lock(mu_);
  if (node_ranks_ == 0 && ranks > 1) node_ranks_ = ranks;
}

TreeComm::NcclTree TreeComm::ncclTree(int tree) const {
  NcclTree t;
  if (node_ranks_ <= 1) {  // NCCL's double binary tree over the ranks (one node each)
    const TreeNeighbours d = doubleBinaryTree(nranks_, self_, tree);
    t.up = d.up;
    t.down = {d.down[0], d.down[1], -1};
    return t;
  }
  // graph/connect.cc: a node's chain in rank order, its head linked to the nodes' tree.
  const int ppn = node_ranks_, local = self_ % ppn, node = self_ / ppn;
  const int nodes = (nranks_ + ppn - 1) / ppn;
  const int last = std::min(nranks_, (node + 1) * ppn) - 1;
  if (self_ < last) t.down[0] = self_ + 1;
  if (local > 0) {
    t.up = self_ - 1;
    return t;
  }
  const TreeNeighbours d = doubleBinaryTree(nodes, node, tree);
  t.up = d.up >= 0 ? d.up * ppn : -1;
  t.down[1] = d.down[0] >= 0 ? d.down[0] * ppn : -1;
  t.down[2] = d.down[1] >= 0 ? d.down[1] * ppn : -1;
  return t;
}

int TreeComm::channelIndex(int tree, int k) const {
  if (base_ > 0) return (k / base_) * 2 * base_ + tree * base_ + k % base_;
  return tree == 0 ? k : connected_[0] + k;
}

TreeOpPlan TreeComm::nextOp(int tree, int ordinal, std::uint64_t* cursor, std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  const int real = std::max(1, connected_[0] + connected_[1]);
  const int id = channelIndex(tree, ordinal);  // NCCL's channel index
  const auto e = log_->next(cursor, [&](const CollectiveEntry& c) {
    return c.algo == model::Algo::Tree && c.func == model::Func::AllReduce &&
           id < (c.channels > 0 ? std::min(c.channels, real) : real);
  });
  if (!e) {
    // No record: one unit of what was posted, the channels the real rank connected.
    TreeOpPlan p;
    p.units = 1;
    p.unit_bytes = static_cast<double>(bytes);
    std::tie(p.nvl, p.net) = hops(model::Proto::Simple, real);
    p.overhead_ns = overhead_ns_[static_cast<int>(model::Proto::Simple)];
    return p;
  }
  return plan(*e, real);
}

TreeOpPlan TreeComm::plan(const CollectiveEntry& e, int real) const {
  // The real NCCL runs the operation on min(target's, its own) channels; a channel then
  // stands for target / used of the target's (same bytes per link as the target).
  real = std::max(1, real);
  const int target = e.channels > 0 ? e.channels : real;  // 0: NCCL's own count
  const int used = std::min(target, real);
  const double per_channel = static_cast<double>(e.bytes) / used;
  const double chunk = kSlotDataBytes[static_cast<int>(e.proto)];
  TreeOpPlan plan;
  plan.units =
      std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(per_channel / chunk)));
  plan.unit_bytes = per_channel / static_cast<double>(plan.units);
  std::tie(plan.nvl, plan.net) = hops(e.proto, target);
  const double stand_for = static_cast<double>(target) / used;
  plan.nvl.ns_per_byte /= stand_for;
  plan.net.ns_per_byte /= stand_for;
  plan.overhead_ns = overhead_ns_[static_cast<int>(e.proto)];
  return plan;
}

std::shared_ptr<TreeChannel> TreeComm::channelLocked(int tree, int ordinal) {
  auto& ch = channels_[{tree, ordinal}];
  if (!ch) {
    // Runtime connect makes a channel when the operation that first needs it is enqueued,
    // but the proxy makes the connection later: a program that enqueues operations back to
    // back (NCCL-tests, hybrid_nccl) may have enqueued many more by then (rank 5 of 64 on
    // the H200: all 14 of its 1 KiB all-reduces; starting at the newest record left 13 of
    // them without one, timed at the 512 KiB slot size: 441 instead of 150 us). So the
    // channel starts where the channel furthest behind is (the first operation one of them
    // has not started), or at the log's start when it is the first: records of operations
    // that do not include it are skipped by nextOp.
    std::uint64_t start = 0;
    for (std::size_t i = 0; i < cursors_.size(); ++i)
      start = i == 0 ? *cursors_[i] : std::min(start, *cursors_[i]);
    auto cursor = std::make_shared<std::uint64_t>(start);
    cursors_.push_back(cursor);
    ch = std::make_shared<TreeChannel>(
        targetTreePosition(self_, nranks_, shape_.ranks_per_node, tree),
        ncclTree(tree).up >= 0,
        [self = weak_from_this(), tree, ordinal, cursor](std::uint64_t bytes) {
          if (auto comm = self.lock()) return comm->nextOp(tree, ordinal, cursor.get(), bytes);
          TreeOpPlan gone;  // the context was finalized under a live connection
          gone.unit_bytes = static_cast<double>(bytes);
          return gone;
        },
        quiet_);
  }
  return ch;
}

namespace {
template <typename Tree>
std::optional<TreeRole> roleIn(const Tree& t, bool send, int peer) {
  if (peer < 0) return std::nullopt;
  if (peer == t.up) return send ? TreeRole::ToParent : TreeRole::FromParent;
  for (const int d : t.down)
    if (peer == d) return send ? TreeRole::ToChild : TreeRole::FromChild;
  return std::nullopt;
}
}  // namespace

std::shared_ptr<VirtualLink> TreeComm::link(bool send, int peer, int ordinal) {
  std::unique_lock lock(mu_);
  const auto r0 = roleIn(ncclTree(0), send, peer);
  const auto r1 = roleIn(ncclTree(1), send, peer);
  if (!r0 && !r1) return nullptr;
  if (r0 && r1) {
    // A neighbour in both trees: the exchange numbers its channels of tree 0, then those of
    // tree 1, in one run of ordinals; where tree 1 begins is known once all are connected.
    int& seen = both_[{send, peer}];
    seen = std::max(seen, ordinal + 1);
    return std::make_shared<VirtualLink>(
        [self = weak_from_this(), send, peer, ordinal, r0 = *r0, r1 = *r1]() {
          if (auto comm = self.lock()) return comm->bindBoth(send, peer, ordinal, r0, r1);
          return std::pair{
              std::make_shared<TreeChannel>(TreePosition{}, false,
                                            [](std::uint64_t b) {
                                              return TreeOpPlan{1, static_cast<double>(b), {}, {}};
                                            }),
              r0};
        });
  }
  const int tree = r0 ? 0 : 1;
  const TreeRole role = r0 ? *r0 : *r1;
  connected_[tree] = std::max(connected_[tree], ordinal + 1);
  auto ch = channelLocked(tree, ordinal);
  // Lock order: a channel's lock is taken before this one (nextOp), never after.
  lock.unlock();
  if (role == TreeRole::ToParent) ch->setSendsUp();
  return std::make_shared<VirtualLink>(std::move(ch), role);
}

int TreeComm::ncclChannel(bool send, int peer, int ordinal) {
  std::lock_guard lock(mu_);
  const bool in0 = roleIn(ncclTree(0), send, peer).has_value();
  const bool in1 = roleIn(ncclTree(1), send, peer).has_value();
  if ((!in0 && !in1) || ordinal < 0) return -1;
  if (in0 && in1) return ordinal;  // a connection on every channel (bindBoth)
  return base_ > 0 ? channelIndex(in0 ? 0 : 1, ordinal) : -1;
}

std::pair<std::shared_ptr<TreeChannel>, TreeRole> TreeComm::bindBoth(bool send, int peer,
                                                                     int ordinal, TreeRole r0,
                                                                     TreeRole r1) {
  std::unique_lock lock(mu_);
  int tree = 0, k = 0;
  if (base_ > 0) {  // a neighbour in both trees has a connection on every channel: c = ordinal
    tree = ordinal % (2 * base_) / base_;
    k = ordinal / (2 * base_) * base_ + ordinal % base_;
  } else {
    const int per_tree = std::max({connected_[0], connected_[1], (both_[{send, peer}] + 1) / 2, 1});
    tree = ordinal < per_tree ? 0 : 1;
    k = ordinal - tree * per_tree;
  }
  connected_[tree] = std::max(connected_[tree], k + 1);
  const TreeRole role = tree == 0 ? r0 : r1;
  auto ch = channelLocked(tree, k);
  lock.unlock();  // lock order as in link()
  if (role == TreeRole::ToParent) ch->setSendsUp();
  return {std::move(ch), role};
}

}  // namespace crystal::live
