// Timing of one tree channel of a real rank whose tree neighbours are virtual.
//
// The model (replay/model steps.h treeRun, pipeline.h chainRecurrence) runs a tree
// all-reduce as a tandem line of hops every chunk crosses in order: up the target node's
// chain (NVLink), up the double binary tree of nodes (NET), down again. A hop takes
// tx + latency per chunk and accepts the next chunk share x tx later (share 2: each link
// also carries the other direction's chunk). Tree chunks are one step (chunkSteps = 1).
//
// The real rank sits at one place of the target's tree (TreePosition, from NCCL's tree rules
// applied to the target's nodes). Its chunk u arrives from below along the `below` hops,
// from virtual leaves that start when the operation starts; its own send up of u leaves once
// both that arrival and the real proxy's post happened, and the result comes back down the
// `loop` hops (up to the root and back). TreeChannel runs those hops for every unit:
//   * a receive from a child completes at the arrival from below (A),
//   * a receive from the parent at the arrival down the loop (D), driven by the real send,
//   * a real rank with no parent in NCCL's own tree (its root) gets D on its receives from
//     children instead: that is when the target's rank there would hold the result.
// So the real rank's last receive comes when the model says the result reaches its place,
// whatever role NCCL's own (flat) tree gave it.
//
// Operations in a row: the virtual leaves below the real rank start the next operation when
// they finished this one (the whole line and the operation's fixed cost, the model's time,
// after they started it) plus the time the real rank was quiet before the next (QuietClock:
// compute; 0 back to back), not when the real rank starts it. A rank above them (the root, a
// node head) holds its result before they do, so restarting them with the real rank made
// its period its own place's time where the target's ranks, each waiting for the others'
// data, all run at the whole line's pace. Never before the real rank's start: a real rank
// slower than the model sets the pace.
//
// The chunk size and channel count are not in the proxy's posts (a receive is posted at the
// slot size); they come from the tuner's record of the collective (collective_log.h). An
// operation with no record is timed one unit at a time with the post's bytes (approximate).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "crystal/live/clock.h"

namespace crystal::live {

// NCCL's double binary tree over n members (graph/trees.cc ncclGetDtree): tree 0 is the
// binary tree whose root is 0, tree 1 its mirror (n even) or shift by one (n odd).
struct TreeNeighbours {
  int up = -1;
  std::array<int, 2> down = {-1, -1};
};
[[nodiscard]] TreeNeighbours doubleBinaryTree(int n, int member, int tree);

// Where a rank sits in the target's tree of a channel of tree `tree` (0/1): nodes of
// `ranks_per_node` consecutive ranks; inside a node a chain in rank order whose first member
// (the head) links to the parent node; the nodes form NCCL's double binary tree.
struct TreePosition {
  std::vector<bool> below;  // hops (true = NET) from the deepest leaf under it up to it
  std::vector<bool> loop;   // hops from it to the root and back down to it (root: empty)
  std::vector<bool> line;   // the target's whole line: its deepest leaf to the root and back
  bool child_net = false;   // its hop down to a child
  int depth = 0;            // hops to the root
};
[[nodiscard]] TreePosition targetTreePosition(int rank, int nranks, int ranks_per_node, int tree);

// One hop of one channel for one operation (the model's per-channel tree step).
struct TreeHop {
  TimeNs latency_ns = 0;
  double ns_per_byte = 0;
  [[nodiscard]] TimeNs tx(double bytes) const noexcept {
    return static_cast<TimeNs>(bytes * ns_per_byte + 0.5);
  }
};

// What a tree operation looks like on one channel.
struct TreeOpPlan {
  std::uint64_t units = 1;  // proxy steps of this channel
  double unit_bytes = 0;    // bytes of each
  TreeHop nvl, net;
  TimeNs overhead_ns = 0;   // the model's fixed cost of the operation (launch, base latency)
};

enum class TreeRole : std::uint8_t { FromChild, ToParent, FromParent, ToChild };

// The real rank's quiet time on a communicator, shared by its tree channels. While an
// operation runs, a proxy call or a completion already given lies at most a few us back on
// some channel (completions can lie ahead: a receive's arrival is given when it is posted);
// a longer silence on all of them is the program doing something else (compute). One
// channel's own silence is not: a channel done early waits for the others to end.
class QuietClock {
 public:
  static constexpr TimeNs kQuietNs = 20'000;
  void call(TimeNs now);  // the real rank's proxy called at `now`
  void until(TimeNs t);   // a request of it completes at `t`
  // The latest quiet period that ended after `since`: its length; 0 if none.
  [[nodiscard]] TimeNs quietAfter(TimeNs since) const;

 private:
  mutable std::mutex mu_;
  TimeNs last_ = 0, gap_ = 0, gap_end_ = 0;
};

class TreeChannel {
 public:
  static constexpr std::uint64_t kWindow = 1024;  // units kept (power of two)
  static constexpr double kShare = 2.0;           // the model's link share of a tree hop
  static constexpr TimeNs kStallSlackNs = 200'000;

  // `next_op(bytes)`: the plan of the channel's next operation (`bytes`: the first post's
  // size, for an operation without a record). `has_parent`: NCCL's own tree gave the real
  // rank a parent on this channel (it sends up and receives down). `quiet`: the
  // communicator's (null: this channel's own).
  TreeChannel(TreePosition pos, bool has_parent,
              std::function<TreeOpPlan(std::uint64_t bytes)> next_op,
              std::shared_ptr<QuietClock> quiet = nullptr);

  // `alone`: nothing else was outstanding on the request's connection when it was posted.
  // NCCL serves a connection's operations one after the other (the next starts when the one
  // before is done on it), so only such a post can start an operation: a post beyond the
  // plan with others outstanding is the same operation going on (the plan was short), and
  // no record is used for it.
  //
  // The real rank's send of `unit` (the connection's sequence number) to its parent: returns
  // when it has left its link.
  [[nodiscard]] TimeNs postUpSend(std::uint64_t unit, TimeNs now, std::uint64_t bytes,
                                  bool alone = true);
  // Its send of `unit` to a child over a link of its own (`free_at`: that link's state).
  [[nodiscard]] TimeNs postDownSend(std::uint64_t unit, TimeNs now, std::uint64_t bytes,
                                    TimeNs& free_at, bool alone = true);
  // A receive of `unit` was posted at `now` (the first post of an operation starts it).
  void postRecv(std::uint64_t unit, TimeNs now, std::uint64_t bytes, bool alone = true);
  // Arrival of receive `unit`; std::nullopt while it depends on a send not yet posted.
  [[nodiscard]] std::optional<TimeNs> recvArrival(TreeRole role, std::uint64_t unit, TimeNs posted,
                                                  TimeNs now);
  [[nodiscard]] const TreePosition& position() const { return pos_; }
  // The first unit of the next operation (the units planned so far): a caller that numbers
  // its units per operation (the P2P pacer) starts each there.
  [[nodiscard]] std::uint64_t nextUnit();
  // The real rank's send to its parent has a connection of this channel. Without one (NCCL
  // reuses the ring's connection when the parent is also the ring neighbour on the channel,
  // connIndex 0 for both), its sends are not seen here and the loop runs from the arrival
  // from below, as for a root.
  void setSendsUp();
  // The real rank's sends up are its kernel's writes into the parent's buffer (P2P): a post
  // comes once the unit crossed, so the link's time runs from when the rank held the unit
  // (its arrival from below), not from the post, which only bounds the arrival from below.
  // Without: a post hands the unit to the link (NET: the proxy's isend after the GPU's
  // write), which then takes its time.
  void setUpSendsAreWrites();
  // The real rank's GPU moved a counter of the channel at `t` (P2P: no request of the proxy
  // marks it busy): the time up to `t` is not quiet (compute), which would hold the leaves'
  // next operation back.
  void noteActive(TimeNs t) { quiet_->until(t); }

 private:
  struct Op {
    std::uint64_t first = 0;
    TreeOpPlan plan;
    TimeNs start = 0;      // the real rank's first post of it
    TimeNs idle = 0;       // the real rank's quiet time before it (QuietClock)
    TimeNs leaves = 0;     // when the virtual leaves below it start it
    bool started = false;
  };
  [[nodiscard]] std::size_t slot(std::uint64_t u) const { return u & (kWindow - 1); }
  // The operation unit `u` belongs to (planned on first sight), marking a start at `now`.
  Op& opOf(std::uint64_t u, TimeNs now, std::uint64_t bytes, bool alone = true);
  [[nodiscard]] const TreeHop& hop(const Op& op, bool net) const {
    return net ? op.plan.net : op.plan.nvl;
  }
  // When the leaves below start `op` (its start set), from the operation before it.
  [[nodiscard]] TimeNs leavesStart(const Op& op, const Op* before) const;
  // The hops of `path` for one unit of `op`, each tx + latency.
  [[nodiscard]] TimeNs pathNs(const Op& op, const std::vector<bool>& path) const;
  // The operation of unit `u` (the oldest kept for a unit older than the window).
  [[nodiscard]] Op& opAt(std::uint64_t u);
  // A request completes at `t`; returns t.
  TimeNs seen(TimeNs t);
  [[nodiscard]] std::optional<TimeNs> arrival(TreeRole role, std::uint64_t unit, TimeNs posted,
                                              TimeNs now);
  // Arrival from below of every unit up to `u` (A).
  TimeNs fromBelow(std::uint64_t u);
  // The loop from ready time `ready` (the real rank's own link first): fills D[u], returns
  // when unit u left the real rank, no earlier than `crossed` (a write's post, or 0).
  TimeNs runLoop(std::uint64_t u, TimeNs ready, TimeNs crossed = 0);

  std::mutex mu_;
  TreePosition pos_;
  bool has_parent_;
  bool sends_up_ = false;
  bool up_writes_ = false;
  std::function<TreeOpPlan(std::uint64_t)> next_op_;
  std::shared_ptr<QuietClock> quiet_;
  std::deque<Op> ops_;         // recent operations, oldest first
  std::uint64_t planned_ = 0;  // units covered by ops_
  std::vector<TimeNs> below_free_, loop_free_;
  TimeNs default_up_free_ = 0;
  std::uint64_t a_next_ = 0, d_next_ = 0;
  std::vector<TimeNs> a_, d_;  // [slot]: arrival from below / down the loop
  TimeNs last_send_ = 0;
};

}  // namespace crystal::live
