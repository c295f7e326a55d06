// Timing of one ring channel of a real rank whose ring neighbours are virtual.
//
// The model (replay/model closed_form.h, pipeline.h) runs a ring collective as units (one
// NCCL slice = one isend/irecv of the proxy): member x sends unit u to x+1 once its link is
// free and, from the second step of an operation on, once unit u-s (s = slices per step) from
// x-1 has arrived. Every node holds the same ring positions (period p = members per node), so
// the ring is p classes repeated; the last position of a node sends over the NET, the others
// over NVLink. The real rank is one position q. Its receive of unit u comes from position
// q-1, which by periodicity behaves like the virtual position q+p-1 of the chain
//   q' -> q+1 -> ... -> q+p-1 -> real,
// where q' is a copy of position q on another node: a *target* rank, running at the model's
// pace. So RingChannel runs the model's recurrence open-loop for an idealised q' (it sends
// unit u once its link is free and unit u-s came back from the chain's end) and the p-1
// virtual positions after it, anchored at the operation's start; the real rank's own sends
// only say how many bytes a unit carries. A slow real rank (its GPU/proxy turnaround per
// step) therefore delays its own sends and what it forwards, never the virtual members'
// sends to it: emulated time = max(model, the real rank's own processing). With p = 1 (one
// member per node, or a single node) the chain is q' alone, sending over `in`.
//
// Operation start: an irecv posted on an idle receive connection, or the real rank's send of
// the same unit if that was posted earlier (whichever comes first); no virtual send of the
// operation precedes it. An idle connection whose real rank has not yet sent every earlier
// unit is a slow real rank in the middle of an operation (its GPU had not freed a receive
// slot), not a new one: a new operation posted that early is taken as the old one going on,
// so its first step may arrive up to one step early (never before its post).
//
// Unit size: the real rank's send of the same unit when it was posted, else its newest send
// of the operation (every member sends the same sizes; NCCL's receive sizes are whole slots).
// A receive posted before any send of its operation waits for the first one (ring
// collectives send at once: step 0 needs no data), unless none came for kStallSteps step
// times + kStallSlackNs (one step when the previous operation had no send either): then the
// connection does not pair as a ring's (the end of a broadcast chain) and the receive's own
// size is taken. No hang: every receive is timed.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "crystal/live/link_timing.h"
#include "crystal/model/chain_kernel.h"

namespace crystal::live {

// One link a ring member sends over. A channel gets an equal share of it while `busy`
// channels of the ring are in an operation, never more than `one_ns_per_byte` allows (one
// channel drives one NIC): the model's per-channel bandwidth min(link / channels, cap).
// An operation the real NCCL runs on fewer channels (`running`: the collective's own count,
// or the channels connected when that is unknown) than the link has ports (`ports`, the
// NICs) lets each channel stand for ports / running of them: the target's NCCL would have
// used more channels (the tuner folds a ring onto fewer, plugin/ring_fold.h, or NCCL alone
// connected fewer), and the link, not one port, is what it has.
//
// `unit_ns`: GPU time per unit (slice) that keeps the channel busy besides its bytes, the
// model's StepTiming::ring_unit_us; it is part of the step's latency, so latency_ns is the
// rest (commLinks). A channel standing for several pays it once a unit, as each of them would.
// Ring collectives' slices only (`slice_time`): the model's chains (broadcast, reduce) have
// none, and their real steps are fewer per channel when NCCL runs more channels.
struct RingHop {
  TimeNs latency_ns = 0;
  double link_ns_per_byte = 0;  // whole link (NVLink of a GPU, the NICs a node's members drive)
  double one_ns_per_byte = 0;   // one channel's cap (a NIC port), 0 = none
  int ports = 1;                // ports the link is made of
  TimeNs unit_ns = 0;
  [[nodiscard]] TimeNs occupancy(std::uint64_t bytes, int busy, int running = 0,
                                 bool slice_time = true) const noexcept {
    const double stand_for =
        running > 0 ? std::max(1.0, static_cast<double>(ports) / running) : 1.0;
    const double per_byte =
        std::max(link_ns_per_byte * std::max(1, busy), one_ns_per_byte / stand_for);
    return (slice_time ? unit_ns : 0) +
           static_cast<TimeNs>(static_cast<double>(bytes) * per_byte + 0.5);
  }
};

// What a chain member (broadcast, reduce) spends on an operation besides its links' latency:
// the model's fixed cost of one (`base_ns`, NcclModel::opOverheadUs) with its units' crossing
// of its slower link, and no less than its kernel with peers that never make it wait
// (`kernel` for a broadcast, `reduce_kernel` for a reduce: NcclModel::chainKernel; none by
// default). Back to back a member runs its operations one after the other, so no operation
// reaches the real rank sooner after the last than the slowest member before it takes for one.
struct ChainOpCost {
  TimeNs base_ns = 0;
  model::ChainKernel kernel;
  model::ChainKernel reduce_kernel;
  // One operation (a reduce's with `reduce`) of `units` units of `bytes` over a link that a
  // unit occupies `crossing_ns`.
  [[nodiscard]] TimeNs opNs(std::uint64_t units, std::uint64_t bytes, TimeNs crossing_ns,
                            bool reduce = false) const noexcept {
    if (units == 0) return 0;
    const model::ChainKernel& k = reduce ? reduce_kernel : kernel;
    const double us =
        k.memberOpUs(static_cast<double>(base_ns) / 1e3, static_cast<double>(units),
                     static_cast<double>(bytes), static_cast<double>(crossing_ns) / 1e3);
    return static_cast<TimeNs>(us * 1e3 + 0.5);
  }
};

// When a chain operation's first unit reaches the real rank: a fill (ChainTiming::fill) after
// its head started it (`started`: when the program enqueued it). Back to back with the same
// chain (`streams`) the head starts the next when it ended the last, so the chain streams on:
// no sooner than `paced` (the last operation's units kept coming at the chain's pace), nor
// than an operation of the slowest member after the last one's first unit (`last_first` +
// `last_op`, ChainTiming::op). One rule for the NET path's chains (RingChannel::startChain)
// and the P2P pacer's (P2pPacer::startChainOp); docs/model.md "Broadcast and reduce back to
// back" has the model's.
[[nodiscard]] constexpr TimeNs chainFirstArrival(TimeNs started, TimeNs fill, bool streams,
                                                 TimeNs paced, TimeNs last_first,
                                                 TimeNs last_op) noexcept {
  const TimeNs first = started + fill;
  return streams ? std::max({first, paced, last_first + last_op}) : first;
}

// Where the target runs a chain operation on other channels than the real rank
// (RingChannel::chainTo).
struct ChainTarget {
  int channels = 0;  // 0: the real rank's
  std::uint64_t unit_bytes = 0;
  std::uint64_t units = 0;  // an operation's on a channel
};

class RingChannel {
 public:
  static constexpr int kStallSteps = 4;
  static constexpr TimeNs kStallSlackNs = 200'000;
  static constexpr std::uint64_t kWindow = 1024;  // units kept per channel (power of two)

  // chain[0]: position q's send link (the real rank's and its idealised copy's); chain[j],
  // 0 < j < p: virtual position q+j's send link (chain[p-1] sends to the real rank). With
  // p = 1, chain[0] is the send link and `in` the link into the real rank. `slices`: units
  // per ring step unless a receive says otherwise (Simple: chunkSteps / sliceSteps = 2).
  // `busy`: channels of this ring with receives outstanding (shared). `connected`: ring
  // channels the real rank's NCCL connected (shared; null = unknown).
  RingChannel(std::vector<RingHop> chain, RingHop in, int slices,
              std::shared_ptr<std::atomic<int>> busy,
              std::shared_ptr<std::atomic<int>> connected = nullptr);

  [[nodiscard]] int period() const { return period_; }
  // The chain and `in` links of protocol `proto` (model::Proto index: 0 LL, 1 LL128,
  // 2 Simple; the constructor's are every protocol's until set). An operation uses its
  // protocol's (postRecv): the target's LL hop takes ~1 us where Simple's NET hop takes 14.
  void setProtocolHops(int proto, std::vector<RingHop> chain, RingHop in);
  // A chain member's cost of an operation of protocol `proto` (model::Proto index); none
  // until set (a chain then streams at its slowest hop's pace alone).
  void setChainOpCost(int proto, ChainOpCost cost);

  // The real rank posts its send unit (sequence number = the count so far); returns its
  // completion: when it left the real rank's share of its link (a chain root's: of the
  // chain's slowest link). `channels`: the ring channels its operation runs on (NCCL's
  // profiler), 0 = unknown (the channels connected); they share the link.
  [[nodiscard]] TimeNs postSend(TimeNs now, std::uint64_t bytes, int channels = 0);
  // How long a send unit of `bytes` occupies the real rank's share of its link, as postSend
  // would take it on an idle link (a chain root's: of the chain's slowest link): its bytes
  // only, the slice's GPU time being the real GPU's own.
  [[nodiscard]] TimeNs sendOccupancy(std::uint64_t bytes, int channels = 0);
  // A chain operation (broadcast, reduce) whose head is `hops` ring positions before the real
  // rank, in units of `bytes` on the operation's `channels` (0: the connected ones), `units`
  // of them an operation and channel (0: unknown): `fill`, a unit's way from the head to the
  // real rank (each hop's crossing and latency); `pace`, the chain's slowest hop's crossing
  // (every member moves at it); `last_hop`, the way of the hop into the real rank; `op`, an
  // operation at the slowest member before the real rank (ChainOpCost; 0 when `units` is).
  // `target`: the target runs the operation on other channels (plugin/ring_fold.h gives the
  // real rank more where its GPU needs them): `fill` is then the target's, and the real
  // pace's excess over the target's pace (the first unit of each of the real channels: as
  // many bytes as the target's chain brings in its first units and a part of the next);
  // `op` the target's member's (its kernel's time goes with its bytes a channel).
  struct ChainTiming {
    TimeNs fill = 0, pace = 0, last_hop = 0, op = 0;
  };
  [[nodiscard]] ChainTiming chainTo(int hops, std::uint64_t bytes, int channels = 0,
                                    std::uint64_t units = 0, bool reduce = false,
                                    ChainTarget target = {});
  // The operation whose first receive (`unit`, posted at `now`, postRecv's first = 1) was
  // just posted is a chain whose head is `c.hops` > 0 positions before the real rank, in
  // transfers of `c.unit_bytes` (OpSegments::Place): its receives arrive down the chain, the
  // first a chainTo fill after the head started (when the program enqueued it, `c.issued`,
  // else `now`), then one per pace. Right after the same chain (head, unit size, channels)
  // it streams on from the last one's pace, its first unit no sooner than the last one's
  // first and an operation of its slowest member (`c.units`, ChainTiming::op) (back to back,
  // each member starts an operation when it ended the last: docs/model.md "Broadcast and
  // reduce back to back"); the real rank's
  // proxy posts the next one's receives only as slots free, so its post says nothing of
  // when the head started. Not a chain (hops <= 0 or no size): the ring's rules time it.
  void startChain(std::uint64_t unit, TimeNs now, const ChainRecv& c, int channels = 0);
  // The real rank posted receive `unit`; `idle`: no other receive outstanding on it (an
  // operation starts). `units_per_step`: slices per ring step of the operation's protocol
  // (LL/LL128: 1, Simple: 2), 0 = the channel's default. `proto`: the operation's protocol
  // (model::Proto index), -1 = Simple. `channels`: as postSend's. `first`: 1 = the first
  // receive of its operation on this connection, 0 = a later one (NCCL's profiler placed it),
  // -1 = unknown (an idle post starts an operation, see the header comment).
  void postRecv(std::uint64_t unit, TimeNs now, bool idle, int units_per_step = 0,
                int proto = -1, int channels = 0, int first = -1);
  // A receive completed; `idle`: none is outstanding any more (the operation ended here).
  void recvDone(bool idle);
  // Arrival of receive `unit` (posted at `posted`, `bytes` capacity) once known.
  [[nodiscard]] std::optional<TimeNs> recvArrival(std::uint64_t unit, TimeNs posted,
                                                  std::uint64_t bytes, TimeNs now);

 private:
  [[nodiscard]] static std::size_t slot(std::uint64_t u) { return u & (kWindow - 1); }
  [[nodiscard]] TimeNs& delivered(int pos, std::uint64_t u) {
    return delivered_[static_cast<std::size_t>(pos) * kWindow + slot(u)];
  }
  [[nodiscard]] bool sentInOp(std::uint64_t u) const {
    return u >= op_first_ && u < sends_ && u + kWindow > sends_;
  }
  [[nodiscard]] ChainTiming chainToLocked(int hops, std::uint64_t bytes, int channels,
                                          std::uint64_t units, bool reduce,
                                          ChainTarget target = {});
  // fill, pace and last_hop of a chain whose links carry `busy` channels' units, `running`
  // of them the operation's (RingHop::occupancy); `crossing`: the slowest crossing of a
  // member before the real rank.
  [[nodiscard]] ChainTiming chainWay(int hops, std::uint64_t bytes, int busy, int running,
                                     TimeNs* crossing = nullptr) const;
  // Computes the idealised chain's sends (every position) up to unit `upto` (inclusive).
  void advance(std::uint64_t upto, std::uint64_t capacity);
  // Serialises a unit on the channel's share of a link: returns its delivery time.
  // `own`: the real rank's send, whose GPU already spent the slice time before it posted:
  // the link takes only the bytes.
  [[nodiscard]] TimeNs transmit(const RingHop& hop, TimeNs& free_at, TimeNs ready,
                                std::uint64_t bytes, bool own = false);

  // A ring collective's slices pay the GPU's time per slice (RingHop::unit_ns): Simple rings
  // run 2 slices a step; a chain (broadcast, reduce: 1 a step) or a root's sends do not.
  [[nodiscard]] bool sliceTime() const { return in_op_ && op_lag_ >= 2; }
  // The hop's latency: without the slice time in the occupancy, the whole step latency.
  [[nodiscard]] TimeNs latencyOf(const RingHop& h) const {
    return h.latency_ns + (sliceTime() ? 0 : h.unit_ns);
  }
  [[nodiscard]] const std::vector<RingHop>& chain() const { return chains_[op_proto_]; }
  [[nodiscard]] const RingHop& in() const { return ins_[op_proto_]; }
  // The chain's hop with the least bandwidth per channel (the link a send-only root is paced
  // by); `in` as well for a one-member period.
  [[nodiscard]] const RingHop& slowest() const {
    const RingHop* s = &in();
    for (const RingHop& h : chain())
      if (h.link_ns_per_byte > s->link_ns_per_byte) s = &h;
    return *s;
  }

  std::mutex mu_;
  int period_;
  int slices_;
  static constexpr std::size_t kSimple = 2;
  std::array<std::vector<RingHop>, 3> chains_;  // per protocol
  std::array<RingHop, 3> ins_;
  std::array<ChainOpCost, 3> chain_costs_{};  // per protocol
  std::size_t op_proto_ = kSimple;  // the operation's protocol
  std::shared_ptr<std::atomic<int>> busy_;
  std::shared_ptr<std::atomic<int>> connected_;
  int op_channels_ = 0;  // channels the operation runs on (0: unknown, the connected ones)
  bool in_op_ = false;
  // The real rank's sends: its own link share, count, and per unit post time and size.
  TimeNs real_free_ = 0;
  std::uint64_t sends_ = 0;
  std::vector<TimeNs> posted_;        // [slot]
  std::vector<std::uint64_t> bytes_;  // [slot]
  // The operation the receives are in: first unit, start, slices per step, newest send size
  // (0: none yet).
  bool have_op_ = false;
  std::uint64_t op_first_ = 0;
  TimeNs op_start_ = 0;
  std::uint64_t op_lag_ = 1;
  std::uint64_t op_bytes_ = 0;
  bool recv_only_ = false;  // the previous operation had no send: wait one step, not kStall
  // The idealised chain: [pos] link share free, [pos * kWindow + slot] delivery of pos's send.
  std::vector<TimeNs> free_at_;
  std::vector<TimeNs> delivered_;
  std::uint64_t frontier_ = 0;  // next unit to compute
  // The operation is a chain (startChain): its first unit, that unit's arrival and the pace
  // of the ones after it. `chain_last_`: the operation before was one too, of `chain_key_`.
  bool chain_op_ = false;
  bool chain_last_ = false;
  struct ChainKey {
    int hops = 0;
    std::uint64_t unit_bytes = 0;
    int channels = 0;
    bool reduce = false;  // a reduce's chain is another than a broadcast's
    bool operator==(const ChainKey&) const = default;
  } chain_key_;
  std::uint64_t chain_first_ = 0;
  TimeNs chain_start_ = 0;
  TimeNs chain_pace_ = 0;
  TimeNs chain_op_ns_ = 0;  // the last chain operation at its slowest member (ChainTiming::op)
};

}  // namespace crystal::live
