// The tree channels of one real rank in one communicator: which of its tree connections
// belong together, where it sits in the target's tree, and what each operation looks like.
//
// NCCL's own tree for a real rank alone on its emulated host is the double binary tree over
// all ranks (every rank is a node of its own): channels 0..n-1 use tree 0, n..2n-1 tree 1
// (graph/connect.cc connectTrees), copied in blocks of 2n when NCCL adds channels. The
// host's exchange numbers the connections to one peer in one direction by channel (the k-th
// entry = the k-th channel that connects to that peer), so a connection to peer P with
// ordinal k belongs to the k-th channel of the tree in which P is the real rank's parent or
// child (setBaseChannels says which NCCL channel that is). Its timing follows the target's tree
// (targetTreePosition): target nodes of cluster.gpus_per_node ranks.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "crystal/live/collective_log.h"
#include "crystal/live/nccl_slots.h"
#include "crystal/live/target_model.h"
#include "crystal/live/tree_timing.h"

namespace crystal::live {

class TreeComm : public std::enable_shared_from_this<TreeComm> {
 public:
  // Create through std::make_shared: its channels ask it (weakly) for their operations.
  // A tree step is one slot (enqueue.cc calcCollChunking: chunkSteps 1): kSlotDataBytes.

  TreeComm(const TargetModel& model, const ClusterConfig& cluster, std::uint64_t comm_id, int self,
           int nranks);

  // The link of a tree connection (send to / receive from `peer`, the exchange's ordinal),
  // or null when `peer` is no neighbour of the real rank in NCCL's double binary tree.
  [[nodiscard]] std::shared_ptr<VirtualLink> link(bool send, int peer, int ordinal);
  // NCCL's channel of that connection: the ordinal for a neighbour in both trees (connected
  // on every channel); for one in one tree, -1 until setBaseChannels (its channels are
  // numbered within the tree). -1 also when `peer` is no neighbour.
  [[nodiscard]] int ncclChannel(bool send, int peer, int ordinal);
  [[nodiscard]] model::CommShape shape() const { return shape_; }
  // NCCL's channels per tree before it duplicated them (n; the host reads it from the graph
  // all-gather). Known, channel c runs tree (c mod 2n) / n — NCCL copies its 2n channels
  // in blocks (compute-channel doubling, NCCL_MIN_NCHANNELS) — so a connection to a
  // neighbour in one tree t with ordinal k is channel (k / n) * 2n + t * n + k % n, and one
  // to a neighbour in both trees is channel k. Unknown (0): channels 0..n-1 tree 0, n..2n-1
  // tree 1 with n the connections seen. The first value given stays.
  void setBaseChannels(int n);
  // NCCL's tree runs over nodes of `ranks` consecutive ranks (emulation.p2p_peers: the real
  // rank's node fused, the others copies of it), each a chain in rank order whose head links
  // to the nodes' double binary tree (pattern TREE: every NET link at the head), instead of
  // one node per rank. Only the connections' roles change: the timing is the target's place
  // either way. The first value given stays; call before the first link().
  void setNodeRanks(int ranks);

  // The plan of the next tree operation of channel (tree, ordinal) from the log; `bytes`
  // stands in when there is no record (tuner off, or not a tree all-reduce's order).
  [[nodiscard]] TreeOpPlan nextOp(int tree, int ordinal, std::uint64_t* cursor,
                                  std::uint64_t bytes);
  // The plan of tree all-reduce `e` on one channel when the real NCCL connected `real`
  // channels: it runs on min(target's, real) of them, each standing for target / used of the
  // target's (the same bytes per link as the target). Also the P2P pacer's (p2p_pacer.h).
  [[nodiscard]] TreeOpPlan plan(const CollectiveEntry& e, int real) const;

 private:
  // The real rank's neighbours in NCCL's tree `tree` (setNodeRanks): up, and up to three down.
  struct NcclTree {
    int up = -1;
    std::array<int, 3> down = {-1, -1, -1};
  };
  [[nodiscard]] NcclTree ncclTree(int tree) const;  // under mu_
  [[nodiscard]] std::shared_ptr<TreeChannel> channelLocked(int tree, int ordinal);
  [[nodiscard]] std::pair<std::shared_ptr<TreeChannel>, TreeRole> bindBoth(bool send, int peer,
                                                                           int ordinal, TreeRole r0,
                                                                           TreeRole r1);
  static constexpr int kMaxChannels = 64;  // NCCL's MAXCHANNELS
  [[nodiscard]] std::pair<TreeHop, TreeHop> hops(model::Proto p, int channels) const;

  model::CommShape shape_;
  int self_, nranks_;
  int node_ranks_ = 0;  // setNodeRanks; 0: one node per rank
  std::shared_ptr<CollectiveLog> log_;
  std::mutex mu_;
  int connected_[2] = {0, 0};  // channels of tree 0 / 1 the real rank connected
  int base_ = 0;               // setBaseChannels' n, 0 = unknown
  // NCCL's channel index of the k-th channel of `tree` (under mu_).
  [[nodiscard]] int channelIndex(int tree, int k) const;
  std::map<std::pair<int, int>, std::shared_ptr<TreeChannel>> channels_;  // (tree, ordinal)
  // Each channel's place in the log (the next record it has not used), under mu_.
  std::vector<std::shared_ptr<std::uint64_t>> cursors_;
  std::shared_ptr<QuietClock> quiet_ = std::make_shared<QuietClock>();   // shared by them
  std::map<std::pair<bool, int>, int> both_;  // (send, peer) in both trees: ordinals seen
  // [proto][channels - 1]: NVLink and NET hop of one channel (the model is read once: the
  // plugin may replace it while connections live).
  std::vector<std::pair<TreeHop, TreeHop>> hops_[3];
  TimeNs overhead_ns_[3] = {};  // per protocol: the model's fixed cost of a tree all-reduce
};

}  // namespace crystal::live
