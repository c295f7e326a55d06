// The replay engine's internal state. Split over three files by job:
//   engine_run.cc   a unit's program-order walk over its stream (compute, events, memory,
//                   iteration boundaries, launching communication)
//   engine_comm.cc  matching communication across units (collective arrivals, send/recv
//                   pairs) and finishing launches
//   replay.cc       the event loop, stalls, and the result
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "comm_index.h"
#include "crystal/replay/replay.h"
#include "interval_stats.h"

namespace crystal::replay::detail {

// One simulated unit: a class representative (symmetric) or a rank (naive).
struct UnitState {
  std::int32_t unit = 0, rank = 0, cls = 0;
  std::int64_t ranks = 1;
  std::vector<graph::Op> ops;
  std::size_t pc = 0;
  int iteration = 0;  // repetition of the stream being walked
  bool done = false, blocked = false, scheduled = false, started = false;
  bool ops_since_mark = false;
  std::vector<TimeNs> ready;                         // per stream: when its last op ends
  std::vector<std::int32_t> pending;                 // per stream: unfinished launch, -1 if none
  std::unordered_map<std::uint32_t, TimeNs> events;  // Record tag -> time
  std::unordered_map<std::int32_t, std::uint32_t> coll_seq;  // sync key -> next sequence
  int group_depth = 0;
  std::vector<std::size_t> group;  // op indices of the open group
  std::int64_t memory = 0;
  std::uint64_t peak = 0, executed = 0;
  std::vector<TimeNs> marks;  // iteration boundaries
  std::vector<Interval> intervals;
  std::vector<std::int32_t> traced;  // global ranks traced through this unit
};

struct CollKey {
  std::int32_t unit, sync_key;
  std::uint32_t seq;
  bool operator==(const CollKey&) const = default;
};
struct P2PKey {
  std::int32_t sender, receiver, sync_key, delta;
  std::uint32_t tag;
  std::int32_t iteration;
  bool operator==(const P2PKey&) const = default;
};
struct KeyHash {
  static std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
  }
  std::size_t operator()(const CollKey& k) const {
    return mix(mix(static_cast<std::uint32_t>(k.unit), static_cast<std::uint32_t>(k.sync_key)),
               k.seq);
  }
  std::size_t operator()(const P2PKey& k) const {
    std::uint64_t h =
        mix(static_cast<std::uint32_t>(k.sender), static_cast<std::uint32_t>(k.receiver));
    h = mix(h, static_cast<std::uint32_t>(k.sync_key));
    h = mix(h, static_cast<std::uint32_t>(k.delta));
    h = mix(h, k.tag);
    return mix(h, static_cast<std::uint32_t>(k.iteration));
  }
};

// A send/recv pair's meeting point: each side's arrival and the op waiting for the other.
struct P2PSlot {
  TimeNs send = -1, recv = -1;
  std::int32_t send_op = -1, recv_op = -1;
};

// One communication op in flight.
struct CommOp {
  bool active = false;
  bool p2p = false, is_send = false;
  std::int32_t launch = -1;
  std::int32_t unit = 0;
  std::size_t op_index = 0;
  const CommView* view = nullptr;
  std::uint32_t seq = 0;
  std::size_t cursor = 0;  // next member unit whose arrival is checked
  TimeNs arrival = 0, start = 0;
  TimeNs cost = 0;
  model::Choice choice;
  P2PKey p2p_key{};
};

// Ops launched together (one op, or a group); their streams wait for the last to end.
struct Launch {
  std::int32_t unit = 0;
  std::vector<std::uint8_t> streams;
  int remaining = 0;
  TimeNs end = 0;
  int iteration = 0;
};

struct ChoiceKey {
  int func;
  std::uint64_t bytes;
  int nranks, nnodes, per_node;
  bool operator==(const ChoiceKey&) const = default;
};
struct ChoiceKeyHash {
  std::size_t operator()(const ChoiceKey& k) const {
    std::uint64_t h = KeyHash::mix(static_cast<std::uint64_t>(k.func), k.bytes);
    h = KeyHash::mix(h, static_cast<std::uint64_t>(k.nranks));
    h = KeyHash::mix(h, static_cast<std::uint64_t>(k.nnodes));
    return KeyHash::mix(h, static_cast<std::uint64_t>(k.per_node));
  }
};

struct StatKey {
  bool p2p;
  int kind, family, nranks;
  std::uint64_t bytes;
  int algo, proto, channels;
  bool operator==(const StatKey&) const = default;
};
struct StatKeyHash {
  std::size_t operator()(const StatKey& k) const {
    std::uint64_t h = KeyHash::mix(k.p2p, static_cast<std::uint64_t>(k.kind));
    h = KeyHash::mix(h, static_cast<std::uint64_t>(k.family));
    h = KeyHash::mix(h, static_cast<std::uint64_t>(k.nranks));
    h = KeyHash::mix(h, k.bytes);
    h = KeyHash::mix(h, static_cast<std::uint64_t>(k.algo * 16 + k.proto));
    return KeyHash::mix(h, static_cast<std::uint64_t>(k.channels));
  }
};

class Engine {
 public:
  Engine(const graph::Graph& g, const CostModel& cost, const ReplayOptions& opts);
  [[nodiscard]] ReplayResult run();

 private:
  // engine_run.cc
  void step(UnitState& u);  // walks until done or blocked
  bool boundary(UnitState& u, bool final);
  bool launch(UnitState& u, const std::vector<std::size_t>& op_indices);
  void block(UnitState& u);
  [[nodiscard]] std::size_t streamSlot(UnitState& u, std::uint8_t s);
  // engine_comm.cc
  void startCollective(UnitState& u, std::int32_t launch_id, std::size_t op_index, TimeNs t);
  void startP2P(UnitState& u, std::int32_t launch_id, std::size_t op_index, TimeNs t);
  void publishArrival(const CollKey& k, TimeNs t);
  void advanceCollective(std::int32_t id);
  void finishOp(std::int32_t id, TimeNs start, TimeNs end);
  void finishLaunch(std::int32_t launch_id);
  [[nodiscard]] const model::Choice& choice(model::Func f, std::uint64_t bytes,
                                            const model::CommShape& shape);
  [[nodiscard]] std::int32_t newOp();
  [[nodiscard]] std::int32_t newLaunch();
  // replay.cc
  void forceStalled();
  void recordStat(const CommOp& c, const graph::Op& op);
  void recordTrace(const UnitState& u, const graph::Op& op, TimeNs posted, TimeNs start, TimeNs end,
                   int iteration, std::string_view family);

  const graph::Graph& graph_;
  const CostModel& cost_;
  const ReplayOptions& opts_;
  CommIndex comms_;
  std::vector<UnitState> units_;
  EventQueue<std::int32_t> queue_;  // unit to (re)run
  TimeNs now_ = 0;
  std::vector<CommOp> ops_;
  std::vector<std::int32_t> free_ops_;
  std::vector<Launch> launches_;
  std::vector<std::int32_t> free_launches_;
  std::unordered_map<CollKey, TimeNs, KeyHash> arrivals_;
  std::unordered_map<CollKey, std::vector<std::int32_t>, KeyHash> coll_waiters_;
  std::unordered_map<P2PKey, P2PSlot, KeyHash> p2p_;
  std::unordered_map<ChoiceKey, model::Choice, ChoiceKeyHash> choices_;
  std::unordered_map<StatKey, std::size_t, StatKeyHash> stat_index_;
  ReplayResult result_;
};

}  // namespace crystal::replay::detail
