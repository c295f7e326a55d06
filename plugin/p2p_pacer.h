// Pacing of a real rank's P2P connections to the virtual GPUs of its node by the live ring
// model (emulation.p2p_peers; docs/host.md "Virtual GPUs of a real rank's node").
//
// On such a connection NCCL's kernel in the real rank R moves two counters the virtual GPU V
// would read: the tail of V's recv block (R filled a slot of a send connector) and the head of
// V's send block (R emptied a slot of a recv connector). It waits on two counters V would
// write: the head of R's own send block (credit) and the tail of R's own recv block (data).
// The agent kernel (p2p_agent_abi.h) moves those on the GPU, so no CPU round trip sits on a
// step; this class tells it what to do and touches no GPU:
// - Send credits: V consumes each slice R sends one slice occupancy of R's link after the
//   previous (the model's per-channel share, the link shared by the operation's channels):
//   sliceSteps() and sliceOccupancyNs() per operation.
// - Receives: entries {due, value}: R's tail may move to `value` (the end of a slice) once
//   `due` (RingChannel::recvArrival of that slice, as the NET path times an irecv,
//   crystal/live/ring_timing.h) passed; the agent also waits for the slot (R's head within
//   NCCL_STEPS). In a ring all-reduce, all-gather or reduce-scatter every member sends and
//   receives the same slices: once R's kernel sent its first slice of the operation on a
//   channel (NCCL leaves channels without work idle), the receives are scheduled ahead, up
//   to the operation's slice count, and past it only as far as R's own sends (a channel NCCL
//   gave more than the estimate). Other operations (broadcast, reduce, or one the tuner did
//   not log) receive one-step units, at most one ahead of what R consumed.
//
// Bytes per slice: the operation's per-channel traffic (collective log: function, size,
// channels) over its slice count, by NCCL 2.28.9's ring chunking (enqueue.cc
// calcCollChunking: chunk = stepSize * chunkSteps, loops of channels * nranks chunks).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "crystal/live/clock.h"
#include "crystal/live/collective_log.h"
#include "crystal/live/ring_timing.h"

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

// A receive entry for the agent: R's tail of connection `conn` may move to `value` at `due`.
struct P2pEntry {
  int conn = 0;
  live::TimeNs due = 0;
  std::uint64_t value = 0;
};

class P2pPacer {
 public:
  static constexpr live::TimeNs kNever = std::numeric_limits<live::TimeNs>::max();
  using MakeChannel = std::function<std::shared_ptr<live::RingChannel>()>;
  using Room = std::function<std::size_t(int conn)>;

  // `make` builds the timing of one ring channel (shared by its send and recv connection);
  // `send_hop` is R's link to its ring successor (a channel's share of it).
  P2pPacer(int nranks, MakeChannel make, live::RingHop send_hop);

  // A ring connection of R's to a virtual GPU: `send` = R's send connector; `ordinal` = the
  // k-th connected channel. Returns its index (observe/schedule use it).
  int add(bool send, int ordinal);
  [[nodiscard]] int size() const { return static_cast<int>(conns_.size()); }
  [[nodiscard]] bool isSend(int i) const { return conns_[static_cast<std::size_t>(i)].send; }

  // R's stream reached an operation (the previous one, if any, ended): `op` is its log entry.
  void opStarted(live::TimeNs now, const std::optional<live::CollectiveEntry>& op);
  // The stream went past every operation enqueued: receives outstanding end.
  void opsDone();
  // R moved connection i's counter (V's recv tail for a send connector, V's send head for a
  // recv connector) to `value`. Values only grow; a smaller one is ignored.
  void observe(int i, std::uint64_t value, live::TimeNs now);

  // The current operation's send slices: counter steps each, and V's time to take one.
  [[nodiscard]] int sliceSteps() const { return std::max(1, shape_.slice_steps); }
  [[nodiscard]] live::TimeNs sliceOccupancyNs() const { return slice_ns_; }

  // Appends the receive entries that can be known now, at most room(conn) per connection;
  // returns when to look again (kNever: nothing more until R moves a counter).
  live::TimeNs schedule(live::TimeNs now, std::vector<P2pEntry>& out, const Room& room);

 private:
  struct Channel {
    std::shared_ptr<live::RingChannel> ring;
    int send = -1, recv = -1;         // connection indices
    std::uint64_t op_sends = 0;       // R's send slices in the current operation
    std::uint64_t op_recv_base = 0;   // R's tail when the operation started
    std::uint64_t recv_units = 0;     // receive slices over the channel's life (RingChannel unit)
    std::uint64_t op_recv_done = 0;   // receive slices scheduled in the operation
    bool recv_in_op = false;          // postRecv'd this operation
  };
  struct Conn {
    bool send = false;
    int channel = 0;
    std::uint64_t seen = 0;       // R's counter in the pool block
    std::uint64_t scheduled = 0;  // recv: the newest value scheduled for R's tail
  };
  void endOp();

  int nranks_;
  MakeChannel make_;
  live::RingHop send_hop_;
  std::vector<Conn> conns_;
  std::map<int, Channel> channels_;  // by ordinal
  bool in_op_ = false;
  live::TimeNs op_start_ = 0;
  RingOpShape shape_;
  int op_channels_ = 0;
  live::TimeNs slice_ns_ = 0;
};

}  // namespace crystal::plugin
