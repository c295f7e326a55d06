// Pacing of a real rank's P2P connections to the virtual GPUs of its node by the live ring
// model (emulation.p2p_peers; docs/host.md "Virtual GPUs of a real rank's node").
//
// On such a connection NCCL's kernel in the real rank R moves two counters the virtual GPU V
// would read: the tail of V's recv block (R filled a slot of a send connector) and the head of
// V's send block (R emptied a slot of a recv connector). It waits on two counters V would
// write: the head of R's own send block (credit) and the tail of R's own recv block (data).
// The blocks of V lie in R's process (block_pool.h), so R's process sees the first two (the
// agent kernel copies them to host memory, p2p_agent.h) and writes the other two when the
// model says V would have. The agent kernel applies two rules itself, on the GPU
// (p2p_agent_rules.h): a receive tail never passes R's head + NCCL_STEPS (V fills a slot only
// once R emptied it), and a send unit is credited `sendOccupancy()` after R sent it (when it
// left R's share of the link). This class decides the rest: which receive values to release
// and when, by the model; it touches no GPU.
//
// Units are NCCL slices (Simple: StepPerSlice steps of the counters), as the NET path's
// isend/irecv are (crystal/live/ring_timing.h), so the same RingChannel model times them.
// In a ring all-reduce, all-gather or reduce-scatter every member sends and receives the same
// slices, and every channel of the operation runs the same chain: one RingChannel anchored at
// 0 (the operation's schedule) gives unit k's arrival after the chain's start, the
// operation's: when R's kernel reached it (R's first send, or the pacing thread seeing its
// stream reach it), no sooner than the model's base cost after the last ring operation's end
// as the model has it (its last unit's arrival) or the program's call, as the target runs it.
// That keeps the CPU's work per slice a few array reads (28 channels x 2 sides move a slice
// every ~100 ns at 1 MiB; one RingChannel per channel cost ~900 ns a slice on the H200 host,
// 2026-12-04, and the CPU set the pace). The receives run open loop once R's kernel sent its
// first slice of the operation on a channel (NCCL leaves channels without work idle), up to
// the operation's slice count, and past it only as far as R's own sends (a channel NCCL gave
// more than the estimate, or the next operation's first, counted as its own at its start); a
// channel with no paced send (R sends over the NET: the last of its node's positions in a comm
// over several nodes) runs without waiting for one. A channel with no paced receive (R
// receives over the NET: its node's first position) tells the NET path's RingChannel of that
// ordinal about R's sends (setNetRing), which sizes and anchors the NET receives by them as
// it would by R's NET sends.
//
// A ring broadcast or reduce whose root the program's call gave (the interposer; NCCL's tuner
// does not say it) is a chain: from the root, or from the rank after it to the root. R a
// member `hops` after the chain's head receives one-step units at the chain's pace from it:
// the first `RingChannel::chainTo` fill after the head started (when R's program called the
// operation, as every rank runs the program), each next one the chain's slowest hop later,
// and no sooner than the member before R could write it into R's free slot. Back to back the
// chain streams from one operation into the next (the head ends a send window ahead of the
// rest and starts the next at once): nccl-tests' loop, NcclModel::loopTimeAtRank. R heading
// the chain receives nothing. Rank 5 of 64, 64 MiB, 20 back to back: 172.3 us an operation,
// the model's loop; as other operations were timed before, 218.8 (P2pPacerChain.*). Where
// the tuner runs the chain on more channels than the target's (CollectiveEntry::
// target_channels) the fill and the members' operation are the target's
// (live::ChainTarget), R's units coming at the target's aggregate pace.
// Other operations (broadcast or reduce without a root, or one the tuner did not log) use the
// channel's own RingChannel: one-step units, "posted" once the slot is free (as the CPU saw
// R's head), at most one ahead of what R consumed.
//
// Tree all-reduces (the collective log says NCCL runs Tree): R's node is a chain in rank order
// on every tree channel, as on the target (live/tree_timing.h TreePosition; the host's graph
// file makes NCCL's so, host/node_graph.h), so R's parent is rank - 1 and its child rank + 1.
// NCCL keeps one connector per (channel, peer, direction): the ring's send to rank + 1
// carries the tree's sends down, the ring's receive from rank - 1 the tree's receives from
// the parent (`tree_parent`; a ring the host rotated receives from another member, and that
// connector stays idle); the tree adds a send to rank - 1 (up) and a receive from rank + 1
// (from the child), `add(..., tree_only)`. A live::TreeChannel per channel (channel c of tree
// (c / n) % 2 with NCCL's n, setTreeBase) times them as the NET path times its tree
// connections: a receive from the child at the arrival from the virtual leaves below, one
// from the parent when the result comes back down the loop after R's own send up. Units are
// counter steps (Tree Simple: one step a chunk). Outside a tree operation a tree-only receive
// is released one step ahead of what R consumed (it is not expected to move).
//
// Bytes per unit: the operation's per-channel traffic (collective log: function, size,
// channels) over its slice count, by NCCL 2.28.9's ring chunking (enqueue.cc
// calcCollChunking: chunk = stepSize * chunkSteps, loops of channels * nranks chunks).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "crystal/live/clock.h"
#include "crystal/live/collective_log.h"
#include "crystal/live/ring_timing.h"
#include "crystal/live/tree_timing.h"

namespace crystal::plugin {

inline constexpr int kNcclSteps = 8;                            // NCCL_STEPS
inline constexpr std::uint64_t kP2pSimpleStepBytes = 524'288;  // 4 MiB Simple buffer / 8

// What one operation moves per ring channel, as slices of the counters.
struct RingOpShape {
  bool symmetric = false;     // every member sends and receives the same slices
  int slice_steps = 1;        // counter steps per slice (StepPerSlice)
  int slices_per_step = 1;    // slices per ring step (chunkSteps / sliceSteps)
  std::uint64_t units = 0;    // slices each connection sends (0: unknown)
  std::uint64_t unit_bytes = 0;
};
// `channels` <= 0: `connected`. Unknown functions and algorithms other than the ring give
// the one-step, asymmetric shape with the step size as unit bytes.
[[nodiscard]] RingOpShape ringOpShape(const std::optional<live::CollectiveEntry>& op, int nranks,
                                      int connected);

// An operation's first receives, for the agent kernel to release by itself (p2p_agent_abi.h
// "Preludes", P2pPacer::arm): on each of its channels with a paced receive, unit k < at.size()
// is due at[k] after the operation's start there, R's recv count then at base + (k + 1) *
// steps. It starts `delay` after R's stream reached it (R's head reached `base`), no sooner
// than `start` + `delay`.
struct P2pPrelude {
  struct Recv {
    int conn = -1;           // connection index
    std::uint64_t base = 0;  // R's recv count before the operation
  };
  std::vector<Recv> recvs;
  std::vector<live::TimeNs> at;
  int steps = 1;
  live::TimeNs send_occupancy = 0;  // sendOccupancy() of the operation
  live::TimeNs start = -1;          // the program's call (-1: unknown)
  live::TimeNs delay = 0;           // the model's base cost of an operation (setOpBase)
};

// A counter of R's due to move: connection, value, and when the model made it due.
struct P2pRelease {
  int conn = 0;
  std::uint64_t value = 0;
  live::TimeNs due = 0;
  bool operator==(const P2pRelease&) const = default;
};

class P2pPacer {
 public:
  static constexpr live::TimeNs kNever = std::numeric_limits<live::TimeNs>::max();
  // The longest R's kernel can run an operation before this thread sees its stream reach it
  // (the H100's start lag 3-4 us, a pass, a late one): an earlier send is not its first.
  static constexpr live::TimeNs kEarlyStartNs = 20'000;
  // `connection`: true = one ring channel R connected (shared by its send and recv
  // connection); false = an operation's schedule (not a channel R connected), which shares no
  // busy count (RingChannel's `busy`): the running operation's and an armed one's (arm) may
  // be alive at once, and each stands for the same links.
  using MakeChannel = std::function<std::shared_ptr<live::RingChannel>(bool connection)>;

  // `make` builds the timing of one ring channel; `rank`: R's rank in the comm (-1: unknown,
  // broadcasts and reduces then timed as other asymmetric operations).
  P2pPacer(int nranks, MakeChannel make, int rank = -1);
  // Tree pacing (see the header comment): `make_tree(tree, next_op)` builds the timing of a
  // channel of tree 0 or 1; `plan(entry, channels)` is one channel's plan of a tree
  // all-reduce when R connected `channels`. Without them tree all-reduces are timed as other
  // operations.
  using MakeTree = std::function<std::shared_ptr<live::TreeChannel>(
      int tree, std::function<live::TreeOpPlan(std::uint64_t)> next_op)>;
  using PlanTree = std::function<live::TreeOpPlan(const live::CollectiveEntry&, int channels)>;
  void setTrees(MakeTree make_tree, PlanTree plan);
  // NCCL's tree channels before it doubled them (n: channel c runs tree (c / n) % 2, as it
  // copies channels in blocks of 2n; the host's POOL_PLACE says it). 0: unknown, the first
  // half of R's tree channels is taken as tree 0.
  void setTreeBase(int n) { tree_base_channels_ = n > 0 ? n : 0; }
  // Which tree (0 or 1) the channel of `ordinal` runs, of the `count` channels with tree
  // connectors where it is the `index`-th.
  [[nodiscard]] int treeOf(int ordinal, std::size_t index, std::size_t count) const;

  // A ring connection of R's to a virtual GPU: `send` = R's send connector; `ordinal` = the
  // k-th connected channel. `tree_only`: the tree's own connector of that channel (send to
  // rank - 1, receive from rank + 1). `tree_parent`: a ring receive that also carries the
  // tree's receives from the parent (from rank - 1); a ring receive that does not (R heads
  // its node's tree chain, its ring rotated) is left alone in a tree all-reduce. Returns its
  // index (observe/release use it).
  int add(bool send, int ordinal, bool tree_only = false, bool tree_parent = true);
  [[nodiscard]] int size() const { return static_cast<int>(conns_.size()); }
  // R's head changes kept for receive connection `i` (slotFree's memory): those of the current
  // operation and from within NCCL_STEPS before its start.
  [[nodiscard]] std::size_t headsKept(int i) const {
    return i >= 0 && i < size() ? conns_[static_cast<std::size_t>(i)].heads.size() : 0;
  }
  // Channels with a paced send and no paced receive, by ordinal, that have no NET ring yet.
  [[nodiscard]] std::vector<int> wantNetRings() const;
  // The NET path's RingChannel receiving for channel `ordinal` (see the header comment).
  void setNetRing(int ordinal, std::shared_ptr<live::RingChannel> ring);

  // R's stream reached an operation (the previous one, if any, ended): `op` is its log entry;
  // `issued`: when R's program called it (-1: unknown, taken as `now`), which for a
  // broadcast or reduce stands for when its head started it (every rank runs the program).
  void opStarted(live::TimeNs now, const std::optional<live::CollectiveEntry>& op,
                 live::TimeNs issued = -1);
  // The operation queued after the current one in R's stream (nullopt: none, or none yet);
  // `issued` as opStarted's. When the current one is a chain R receives in and the next is the
  // same chain (function, root, units), the member before R streams into it: the next one's
  // units come into R's free slots at the chain's pace before R's stream reaches it, as a
  // target's sender runs ahead by NCCL's slots, and R's kernel finds them there. Else, past
  // the current operation's units, one ahead of what R consumed (releaseChain).
  void nextOp(const std::optional<live::CollectiveEntry>& op, live::TimeNs issued = -1);
  // The stream went past every operation enqueued: receives outstanding end.
  void opsDone();
  // R's stream has not reached `op`, the first operation after the current one (or after the
  // last, ended; then the caller saw its end long enough ago that R's counters as observed are
  // where it ended): for a ring all-reduce, all-gather or reduce-scatter, plans `op` now and
  // returns its first `max_units` receives of each channel it runs on with a paced receive.
  // The agent kernel releases them itself from the operation's start: R's stream reached it
  // when R took the last operation's receives, the operation's schedule starts the model's base
  // cost later (setOpBase), so a short operation's start does not wait for the CPU to see its
  // stream (an 8-rank group's 1 MiB all-gather on the H100 ran +31 to +45 % so). `issued`: when
  // the program called it (-1: unknown), no sooner than which it starts. While an operation
  // runs, R's counts before `op` are where that one ends, which only a ring all-reduce,
  // all-gather or reduce-scatter says. nullopt, nothing armed, otherwise. opStarted of the
  // same operation takes this plan, counts its receives from these bases and starts it at the
  // earliest anchor (anchored); till one comes its receives wait for the kernel's.
  std::optional<P2pPrelude> arm(const std::optional<live::CollectiveEntry>& op,
                                std::size_t max_units, live::TimeNs issued = -1);
  // The agent kernel anchored the armed operation (or the current one, armed) on a channel at
  // `now`; or every channel's anchor was missed (R took its receives before the arm reached
  // the kernel): it starts as an operation not armed, at its first send.
  void anchored(live::TimeNs now);
  void anchorsMissed();
  // The model's base cost of an operation (NcclModel::opOverheadUs, ns): an armed operation's
  // schedule starts that long after R's stream reached it.
  void setOpBase(live::TimeNs ns) { op_base_ns_ = std::max<live::TimeNs>(0, ns); }
  // An operation is current (opStarted, until opsDone).
  [[nodiscard]] bool inOp() const { return in_op_; }
  // What the current operation waits on, for a stall's message: its kind and plan, and over
  // the paced receives how many R has consumed all that was released of (it waits on this
  // class) and the range of what R consumed.
  [[nodiscard]] std::string stateLine() const;
  // The operation after the current one may be armed (arm): the current one is a ring
  // schedule, started (armed: its anchor came) and R's kernel is in it on every channel it
  // runs (its first send seen kArmAheadNs ago: R's blocks start together), so where it ends
  // on each is known.
  [[nodiscard]] bool canArmAhead(live::TimeNs now) const;
  // The current operation was armed (arm).
  [[nodiscard]] bool preludeOp() const { return prelude_op_; }
  // R moved connection i's counter (V's recv tail for a send connector, V's send head for a
  // recv connector) to `value` at `now` (when R's kernel did, which may be before the
  // operation's start as the CPU saw it: a ring operation's schedule then starts there).
  // Values only grow; a smaller one is ignored.
  void observe(int i, std::uint64_t value, live::TimeNs now);
  // Appends each receive connection whose tail in R's block is due to move by `now`, the
  // newest value only, with the time it became due; returns when the next one is due
  // (kNever: none pending, or pending on R). Send heads are the agent kernel's (credits).
  live::TimeNs release(live::TimeNs now, std::vector<P2pRelease>& out);
  // The current operation's send units, for the agent kernel's credits: how long one
  // occupies R's share of its link (ns), and its counter steps.
  [[nodiscard]] live::TimeNs sendOccupancy() const { return plan_.send_occupancy; }
  [[nodiscard]] int sendUnitSteps() const { return std::max(1, plan_.shape.slice_steps); }
  // The current operation is a chain R receives in, paced from its head (chainHops).
  [[nodiscard]] bool chainOp() const { return chain_op_; }

 private:
  struct Channel {
    std::shared_ptr<live::RingChannel> ring;  // asymmetric operations
    std::shared_ptr<live::RingChannel> net_ring;  // R's receive on this channel is NET's
    int send = -1, recv = -1;  // connection indices
    std::uint64_t op_sends = 0;      // R's send slices in the current operation
    // R's send counter steps seen between operations, or past the current one's sends: the
    // next operation's first (opStarted starts op_sends there, in that operation's slices). R's
    // kernel starts an operation a few microseconds before the pacing thread sees its stream
    // reach it, and its first sends (a small one's only ones on a channel) may be seen before:
    // counted for the operation before and dropped at the start, the channel's receives never
    // opened (R waited until the stall bound; the H100's split groups' first timed 1 KiB
    // all-reduce, 2026-12-05). Steps, not slices: before the first operation no slice size is
    // known, and a 2-step slice counted as 2 let the CPU release a slice past the operation.
    std::uint64_t early_steps = 0;
    // arm: in the armed operation's prelude, R's recv count before it.
    bool armed = false;
    std::uint64_t armed_base = 0;
    std::uint64_t op_recv_base = 0;  // R's recv tail released when the operation started
    // The running operation's base is its arm's (armed_base), which a head seen later does
    // not move; a channel left out of the arm counts from R's head, as an unarmed one's.
    bool op_from_arm = false;
    std::uint64_t recv_units = 0;   // asymmetric receive slices over its life (`ring`'s unit)
    std::uint64_t op_recv_done = 0;  // receive slices released in the operation
    bool recv_in_op = false;         // postRecv'd this operation (asymmetric)
    // Chain operations R receives in (chainOp): when the chain brings R its next unit, on the
    // chain's own clock (it does not wait for R, only R's slots do).
    live::TimeNs chain_next = 0;
    live::TimeNs chain_op_first = 0;  // when the chain operation's first unit was due
    // Units released past the last chain operation's: the next one's first, when it streams
    // on from it (opStarted counts them as its own).
    std::uint64_t carried = 0;
    // Tree all-reduces: the tree-only connectors, the channel's timing and, per operation,
    // its first unit, R's sends up and down, the receive slices from the child released and
    // R's head of that connector when the operation started. The receives from the parent
    // use `recv`, op_recv_base and op_recv_done.
    int tree_send = -1, tree_recv = -1;
    std::shared_ptr<live::TreeChannel> tree;
    std::uint64_t tree_base = 0;
    std::uint64_t up_sent = 0, down_sent = 0;
    std::uint64_t child_done = 0, child_base = 0;
  };
  struct Conn {
    bool send = false;
    bool tree_only = false;
    bool tree_parent = true;  // a ring receive: the tree's from the parent too (add)
    Channel* ch = nullptr;  // its ring channel (channels_, by ordinal)
    std::uint64_t seen = 0;      // R's counter in the pool block
    std::uint64_t released = 0;  // recv: the value of R's own tail, released so far
    // recv: R's head changes (value, time), from within NCCL_STEPS before the operation's
    // start.
    std::deque<std::pair<std::uint64_t, live::TimeNs>> heads;  // pruned as slots are asked
  };
  void endOp();
  // The last operation ends (endOp) and what a chain streams on with is kept (`carried`).
  void finishOp();
  // A symmetric operation's schedule (see the header comment): its chain and unit k's arrival
  // after the start, as far as asked; one per operation shape (planOf).
  struct Schedule {
    std::shared_ptr<live::RingChannel> ring;
    std::vector<live::TimeNs> at;
    live::TimeNs send_occupancy = 0;
  };
  // What opStarted plans for an operation (planOf), kept for an armed one until it starts.
  struct Plan {
    RingOpShape shape;
    int channels = 0;  // the log entry's (0: not logged)
    std::shared_ptr<Schedule> sched;  // symmetric operations
    live::TimeNs send_occupancy = 0;  // a send unit on R's share of its link
  };
  [[nodiscard]] Plan planOf(const std::optional<live::CollectiveEntry>& op, int connected);
  [[nodiscard]] static live::TimeNs scheduledIn(Plan& p, std::uint64_t k);
  [[nodiscard]] int connectedChannels() const;  // channels with a connection of R's
  // R's sends a channel in the current operation: a ring's slices, a chain member's units
  // (none at its tail); the maximum where not known.
  [[nodiscard]] std::uint64_t opSends() const;
  // opStarted for a tree all-reduce: the channels' trees, the plan, the units' base.
  void startTreeOp(live::TimeNs now, const live::CollectiveEntry& op, int connected);
  // opStarted for a chain operation R receives in (chainHops): its timing and where the
  // chain stands.
  void startChainOp(live::TimeNs now, const std::optional<live::CollectiveEntry>& op,
                    live::TimeNs issued);
  // release() of receive connection `c` of `ch` in a tree all-reduce: appends to `value`/`due`
  // and returns when the next is due.
  live::TimeNs releaseTree(Conn& c, Channel& ch, live::TimeNs now, std::uint64_t& value,
                           live::TimeNs& due);
  // Symmetric operations: unit k's arrival after the operation started.
  [[nodiscard]] live::TimeNs scheduled(std::uint64_t k);
  // The recv slot of `end` is free (R's head within NCCL_STEPS of it): when, no earlier than
  // `floor` (a ring's: the operation's start), or nullopt. Drops the head changes no later
  // unit can need (its `need` only grows).
  [[nodiscard]] static std::optional<live::TimeNs> slotFree(Conn& c, std::uint64_t end,
                                                            live::TimeNs floor);

  // A ring broadcast or reduce with its root known: the members before R in its chain (0: R
  // heads it; more: R's receives come at the chain's pace from its head, see the header
  // comment); nullopt for any other operation.
  [[nodiscard]] std::optional<int> chainHops(const std::optional<live::CollectiveEntry>& op) const;
  // release() of R's receive `c` of `ch` in such an operation.
  live::TimeNs releaseChain(Conn& c, Channel& ch, live::TimeNs now, std::uint64_t& value,
                            live::TimeNs& due);

  int nranks_;
  int rank_;
  MakeChannel make_;
  std::vector<Conn> conns_;
  std::map<int, Channel> channels_;  // by ordinal
  bool in_op_ = false;
  live::TimeNs op_start_ = 0;
  bool op_released_ = false;  // a receive of the operation was released (its start is fixed)
  Plan plan_;                 // the current operation's
  // The operation armed with a prelude until its opStarted (arm), its plan, the earliest first
  // send of it seen or anchored, and whether the current operation was armed.
  std::optional<live::CollectiveEntry> armed_;
  Plan armed_plan_;
  live::TimeNs armed_anchor_ = kNever;      // the earliest anchor of the armed operation
  bool armed_missed_ = false;               // every anchor of it missed
  bool prelude_op_ = false;
  // The current (armed) operation's receives wait for its anchor; or, past kAnchorWaitNs
  // after its first send, start at that send.
  bool prelude_wait_ = false;
  bool prelude_fell_back_ = false;  // it gave up waiting (every channel runs)
  live::TimeNs op_started_at_ = 0;  // when opStarted was called
  // R's first send seen in the current operation, and past it or between operations (the
  // next one's).
  live::TimeNs op_first_send_ = kNever, early_first_send_ = kNever;
  static constexpr live::TimeNs kArmAheadNs = 5'000;
  // Symmetric operations' schedules by shape (function, bytes, channels, target channels).
  static constexpr std::size_t kSchedulesKept = 64;
  std::map<std::tuple<model::Func, std::uint64_t, int, int>, std::shared_ptr<Schedule>> schedules_;
  static constexpr live::TimeNs kAnchorWaitNs = 50'000;
  live::TimeNs op_base_ns_ = 0;
  // A ring schedule not armed starts no sooner than the model's base cost after the ring
  // schedule before it ended (as the model has it end) or the program called it, whichever is
  // later (kNoFloor: neither known), and no sooner than R's kernel reached it (opStarted).
  static constexpr live::TimeNs kNoFloor = std::numeric_limits<live::TimeNs>::min();
  live::TimeNs op_floor_ = kNoFloor;
  // The current chain operation's timing (chain_op_), and the last one's (function, root,
  // unit bytes) while no other operation came between: the next streams on from it.
  bool chain_op_ = false;
  bool chain_tail_ = false;  // R ends the current chain operation: it sends nothing
  bool chain_head_ = false;  // R heads the current chain operation: its receives stay
  live::RingChannel::ChainTiming chain_;
  std::optional<std::tuple<model::Func, int, std::uint64_t>> last_chain_;
  // nextOp: the operation after the current chain operation streams on from it, and when the
  // program called it (-1: unknown).
  bool next_streams_ = false;
  live::TimeNs next_issued_ = -1;
  // Tree all-reduces: the timings' factory and plans, and the current operation's plan (its
  // TreeChannels ask for it through the box when the operation's first unit is posted).
  MakeTree make_tree_;
  PlanTree plan_tree_;
  bool tree_op_ = false;
  int tree_base_channels_ = 0;
  std::shared_ptr<live::TreeOpPlan> tree_plan_ = std::make_shared<live::TreeOpPlan>();
};

}  // namespace crystal::plugin
