// Timed completions of NET transfers of a real rank (the plugin's virtual and real comms).
//
// Model (docs/plugin.md "Timing model"):
//   * A NIC port is a queue per direction: a transfer starts when it is posted and the port
//     is free, occupies it for bytes / bandwidth, and is delivered `latency` later. Latency
//     overlaps the next transfer's occupancy (pipelined steps), as in LiveScheduler.
//   * Send to a virtual peer: done when it has left the link (start + occupancy); the first
//     send of a burst (none outstanding before it) at its delivery (+ latency).
//   * Receive from a virtual peer on a ring channel: the model's ring recurrence for the
//     virtual members between the real rank's next and prev (crystal/live/ring_timing.h),
//     paired by the connection identity the host writes into handles and Hellos.
//   * Send/receive on a tree channel: the model's tree all-reduce for the real rank's place
//     in the target's tree (crystal/live/tree_timing.h).
//   * Receive on any other connection (PAT, p2p, ...): the peer is taken as ready and
//     streams the burst from its first receive's post S (none outstanding before it):
//     unit k leaves once the inbound port and the unit before it are done, not before S nor
//     more than one latency before its own post, and arrives `latency` later; done no
//     earlier than posted. So a burst pays the latency once, as the model's p2p time does,
//     whatever NCCL's 8-slot window (docs/plugin.md "Peer-ready connections").
//   * Links to a member of the real rank's own target node are NVLink, others NIC ports
//     (crystal/live/target_model.h commLinks).
//   * One proxy thread posts and tests every NET transfer of a rank: a peer-ready NET
//     transfer completes no sooner than `request_ns` after the one before it on the rank's
//     proxy queue (the model's net_request_us; an all-to-all's many small NET transfers are
//     bound by it). Where the real rank's proxy is faster than the target's, its completions
//     keep the target's pace; a slower one sets its own.
// Limits: members are identical (no stragglers).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "crystal/live/clock.h"

namespace crystal::live {

// Per-connection link parameters of the target (from NcclModel::netStep).
struct LinkParams {
  TimeNs latency_ns = 0;
  double ns_per_byte = 0;  // 1 / bandwidth
  // A peer-ready receive's virtual sender writes its units no faster than this (its GPU's
  // pace on a NET p2p channel); 0 = as fast as the link takes them.
  double sender_ns_per_byte = 0;
  // The target proxy thread's time per NET transfer (TargetModel::netRequestUs); 0 = none.
  // Only a link with a proxy queue (a NIC's, not NVLink's) pays it.
  TimeNs request_ns = 0;
  [[nodiscard]] TimeNs occupancy(std::uint64_t bytes) const noexcept {
    return static_cast<TimeNs>(static_cast<double>(bytes) * ns_per_byte + 0.5);
  }
};

// One direction of one NIC port; shared by every connection on that device.
// Reservations fill the earliest gap at or after their ready time, not only the end: a
// GPU-paced p2p sender reserves units ahead in time (one every ~9 us per channel), and another
// channel's units posted after them must slot in between, as a NIC interleaves them, instead
// of queueing behind the last one (+2.8 % on two channels at 64 MiB with an end-only cursor).
class PortQueue {
 public:
  // Reserves `occupancy` in the first free gap at or after `ready`; returns its end.
  [[nodiscard]] TimeNs reserve(TimeNs ready, TimeNs occupancy) noexcept;
  // The first `occupancy` of free time at or after `ready`, in as many gaps as it takes;
  // returns the end of the last piece. A server's work that can be interleaved (the proxy
  // thread's turns, LinkParams::request_ns): no gap shorter than one turn is left unused.
  [[nodiscard]] TimeNs reserveSpread(TimeNs ready, TimeNs occupancy) noexcept;
  // End of the latest reservation.
  [[nodiscard]] TimeNs freeAt() const noexcept;
  // Busy intervals that end this long before the newest ready time are forgotten (a later
  // reservation that far back finds the port free there). A paced p2p sender reserves at most
  // its 8-slot window ahead (~75 us), other connections at their post.
  static constexpr TimeNs kHorizonNs = 1'000'000;

 private:
  struct Busy {
    TimeNs start, end;
  };
  mutable std::mutex mu_;
  // Disjoint, sorted, touching ones merged; [head_, end) live. A vector, not a map: most
  // reservations append (no allocation on NCCL's proxy thread once it has grown).
  std::vector<Busy> busy_;
  std::size_t head_ = 0;
  TimeNs newest_ready_ = 0;
  void forgetOld(TimeNs ready);  // the horizon (caller holds mu_)
};

class RingChannel;  // crystal/live/ring_timing.h
// A broadcast's or reduce's receives at the real rank (RingChannel::startChain).
struct ChainRecv {
  int hops = -1;                 // ring positions from the chain's head; <= 0: not a chain
  std::uint64_t unit_bytes = 0;  // bytes of one transfer; 0: unknown (not timed as a chain)
  TimeNs issued = 0;             // when the program enqueued the operation; 0: unknown
  std::uint64_t units = 0;       // its transfers on this connection; 0: unknown
  bool reduce = false;           // a reduce's chain (its members' kernel: ChainOpCost)
};

// Ring positions from the head of a broadcast's or reduce's chain to `rank` (rings run in
// rank order, the host's graph): a broadcast flows from its root, a reduce from the rank
// after its root to the root. nullopt when `root` or `rank` is not a rank of `nranks`.
[[nodiscard]] inline std::optional<int> chainHops(int root, bool reduce, int rank, int nranks) {
  if (nranks < 2 || root < 0 || root >= nranks || rank < 0 || rank >= nranks) return std::nullopt;
  const int head = reduce ? (root + 1) % nranks : root;
  return ((rank - head) % nranks + nranks) % nranks;
}

class TreeChannel;  // crystal/live/tree_timing.h
enum class TreeRole : std::uint8_t;

// Times the steps of one connection to/from a virtual peer. Either a ring channel's send or
// receive (the RingChannel runs the ring's recurrence for the virtual members), or an
// unpaired connection (tree, PAT, p2p, unknown graph) whose virtual peer is taken as ready:
// its sends go out when posted, its receives arrive one step after they were posted.
class VirtualLink {
 public:
  // `proxy`: the rank's proxy queue, for a NET link (LinkParams::request_ns); none: NVLink.
  VirtualLink(LinkParams params, std::shared_ptr<PortQueue> port,
              std::shared_ptr<PortQueue> proxy = nullptr)
      : params_(params), port_(std::move(port)), proxy_(std::move(proxy)) {}
  // A ring channel's send or receive. Other operations' transfers on the same connection
  // (NCCL shares it with a tree whose chain runs through the same neighbour) are timed
  // peer-ready on `params`/`port`, apart from the ring's recurrence (`own_op` false below).
  VirtualLink(std::shared_ptr<RingChannel> ring, LinkParams params, std::shared_ptr<PortQueue> port,
              std::shared_ptr<PortQueue> proxy = nullptr);
  // One connection of a tree channel (to/from the real rank's parent or a child). Other
  // operations' transfers on it (a ring whose neighbour is this tree neighbour: NCCL reuses
  // the tree's connection when the ring connects after it) are timed peer-ready once
  // setPeerReady named the link; without, on the tree as before.
  VirtualLink(std::shared_ptr<TreeChannel> tree, TreeRole role);
  // A tree connection whose channel is only known once all are made (a peer that is the
  // real rank's neighbour in both trees): `bind` names it at the first transfer.
  using TreeBinder = std::function<std::pair<std::shared_ptr<TreeChannel>, TreeRole>()>;
  explicit VirtualLink(TreeBinder bind);

  // The link and port other operations' transfers on a tree connection are timed on.
  void setPeerReady(LinkParams params, std::shared_ptr<PortQueue> port,
                    std::shared_ptr<PortQueue> proxy = nullptr);

  // Send step posted at `now`: returns its completion time. `idle`: no other send was
  // outstanding on the connection (a burst starts). `own_op` false: the transfer belongs to
  // another operation than the one the connection was made for (a ring connection's tree
  // transfers, a tree connection's ring transfers; see the constructors): timed peer-ready.
  // `channels`: the ring channels the operation runs on (NCCL's profiler), 0 = unknown.
  [[nodiscard]] TimeNs postSend(TimeNs now, std::uint64_t bytes, bool idle = true,
                                bool own_op = true, int channels = 0);
  // Receive `step` (0-based sequence number on this connection among the receives of its
  // kind: its own operations' or the others') posted at `now`; `idle`: no other receive was
  // outstanding on the connection. `units_per_step`: requests per ring step of its protocol
  // (LL/LL128 1, Simple 2), 0 = unknown; `proto`: that protocol (model::Proto index), -1 =
  // unknown (Simple's hops); `channels`: as postSend's; `first`: whether the receive is its
  // operation's first on the connection (1/0, NCCL's profiler), -1 = unknown; with first = 1,
  // `chain`: a broadcast's or reduce's chain down to the real rank (RingChannel::startChain).
  void postRecv(std::uint64_t step, TimeNs now, bool idle, int units_per_step = 0,
                bool own_op = true, int proto = -1, int channels = 0, int first = -1,
                const ChainRecv& chain = {});
  // A receive completed; `idle`: none is outstanding any more.
  void recvDone(bool idle, bool own_op = true);
  // Receive step: its arrival time once known, std::nullopt while it is not (bounded: see
  // crystal/live/ring_timing.h). `now` is the caller's clock.
  [[nodiscard]] std::optional<TimeNs> recvArrival(std::uint64_t step, TimeNs posted,
                                                  std::uint64_t bytes, TimeNs now,
                                                  bool own_op = true);
  [[nodiscard]] const LinkParams& params() const { return params_; }
  [[nodiscard]] bool isRing() const { return ring_ != nullptr; }
  [[nodiscard]] bool isTree() const { return tree_ != nullptr; }
  // A tree connection, bound already or at its first transfer.
  [[nodiscard]] bool treeTimed() const { return tree_ != nullptr || bind_ != nullptr; }

  // The emulation host's stream that opened this connection (a virtual sender's Hello),
  // owned from now on. The host keeps it open while the communicator lives; EOF means the
  // host is gone and the virtual sender with it.
  void watchHost(int fd);
  // False once the watched stream reached EOF or failed; looks at most every
  // kHostCheckNs (one compare otherwise). Always true without a watched stream.
  static constexpr TimeNs kHostCheckNs = 20'000'000;
  [[nodiscard]] bool hostAlive(TimeNs now);
  ~VirtualLink();
  VirtualLink(const VirtualLink&) = delete;
  VirtualLink& operator=(const VirtualLink&) = delete;

 private:
  LinkParams params_;
  std::shared_ptr<PortQueue> port_;
  std::shared_ptr<PortQueue> proxy_;  // the rank's proxy thread (request_ns each), or none
  // A peer-ready transfer done at `t` by the link, later if the proxy is still busy.
  [[nodiscard]] TimeNs afterProxy(TimeNs t);
  std::shared_ptr<RingChannel> ring_;
  std::shared_ptr<TreeChannel> tree_;
  TreeBinder bind_;
  [[nodiscard]] bool bindTree();
  TreeRole role_{};
  std::uint64_t tree_sends_ = 0;  // sequence number of the next send on a tree connection
  TimeNs tree_free_ = 0;          // a send to a child: this link's state
  // The receive postRecv saw last and whether it was alone on the connection (TreeChannel:
  // only such a post starts an operation); recvArrival passes it on for that step.
  std::uint64_t tree_post_step_ = ~std::uint64_t{0};
  bool tree_post_alone_ = true;
  // Peer-ready bursts (docs/plugin.md "Peer-ready connections").
  TimeNs send_left_ = INT64_MIN / 2;  // the previous send left the link (none yet)
  TimeNs burst_delivered_ = 0;  // delivery of the burst's first send
  TimeNs recv_start_ = 0;       // post of the burst's first receive
  TimeNs recv_left_ = 0;        // the previous receive's unit left the virtual sender
  TimeNs recv_written_ = 0;     // the virtual sender's GPU wrote the previous unit
  int host_fd_ = -1;
  TimeNs next_check_ = 0;
  bool host_alive_ = true;
};

}  // namespace crystal::live
