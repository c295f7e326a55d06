// Matching communication across units.
//
// Collectives: every unit publishes its arrival at (unit, sync key, sequence number); a
// unit's call starts when all member units have published the same (sync key, sequence),
// i.e. when the last member arrives, and ends one model time later. In symmetric mode the
// member units are the classes of the members, so a call costs |classes| lookups however
// many ranks it spans.
// Send/recv: both sides meet at a slot keyed by (sender unit, receiver unit, sync key,
// index distance in the communicator, tag, repetition); the transfer starts when both
// sides are posted.
#include <fmt/format.h>

#include <algorithm>

#include "crystal/base/error.h"
#include "engine.h"
#include "names.h"

namespace crystal::replay::detail {

std::int32_t Engine::newOp() {
  if (!free_ops_.empty()) {
    const std::int32_t id = free_ops_.back();
    free_ops_.pop_back();
    ops_[static_cast<std::size_t>(id)] = CommOp{};
    return id;
  }
  ops_.emplace_back();
  return static_cast<std::int32_t>(ops_.size() - 1);
}

std::int32_t Engine::newLaunch() {
  if (!free_launches_.empty()) {
    const std::int32_t id = free_launches_.back();
    free_launches_.pop_back();
    launches_[static_cast<std::size_t>(id)] = Launch{};
    return id;
  }
  launches_.emplace_back();
  return static_cast<std::int32_t>(launches_.size() - 1);
}

const model::Choice& Engine::choice(model::Func f, std::uint64_t bytes,
                                    const model::CommShape& shape) {
  const ChoiceKey key{static_cast<int>(f), bytes, shape.nranks, shape.nnodes, shape.ranks_per_node};
  auto it = choices_.find(key);
  if (it == choices_.end()) {
    it = choices_.emplace(key, cost_.collective(f, bytes, shape)).first;
    ++result_.model_calls;
  }
  return it->second;
}

void Engine::startCollective(UnitState& u, std::int32_t launch_id, std::size_t op_index, TimeNs t) {
  const graph::Op& op = u.ops[op_index];
  const CommView& v = comms_.view(op.comm, u.rank);
  const model::Func f = op.coll == graph::CollKind::AllToAllv
                            ? model::Func::AllToAll
                            : static_cast<model::Func>(static_cast<int>(op.coll));
  const model::Choice ch = v.size <= 1
                               ? model::Choice{model::Algo::Ring, model::Proto::Simple, 0, 0}
                               : choice(f, op.bytes, v.shape);
  const std::uint32_t seq = u.coll_seq[v.sync_key]++;
  const std::int32_t id = newOp();
  CommOp& c = ops_[static_cast<std::size_t>(id)];
  c.active = true;
  c.launch = launch_id;
  c.unit = u.unit;
  c.op_index = op_index;
  c.view = &v;
  c.seq = seq;
  c.arrival = c.start = t;
  c.choice = ch;
  c.cost = usToNs(ch.time_us);
  publishArrival(CollKey{u.unit, v.sync_key, seq}, t);
  advanceCollective(id);
}

void Engine::publishArrival(const CollKey& k, TimeNs t) {
  arrivals_.emplace(k, t);
  auto it = coll_waiters_.find(k);
  if (it == coll_waiters_.end()) return;
  const std::vector<std::int32_t> waiting = std::move(it->second);
  coll_waiters_.erase(it);
  for (std::int32_t id : waiting) advanceCollective(id);
}

void Engine::advanceCollective(std::int32_t id) {
  CommOp& c = ops_[static_cast<std::size_t>(id)];
  const std::vector<std::int32_t>& members = c.view->member_units;
  while (c.cursor < members.size()) {
    const CollKey k{members[c.cursor], c.view->sync_key, c.seq};
    auto it = arrivals_.find(k);
    if (it == arrivals_.end()) {
      coll_waiters_[k].push_back(id);
      return;
    }
    c.start = std::max(c.start, it->second);
    ++c.cursor;
  }
  finishOp(id, c.start, c.start + c.cost);
}

void Engine::startP2P(UnitState& u, std::int32_t launch_id, std::size_t op_index, TimeNs t) {
  const graph::Op& op = u.ops[op_index];
  const CommView& v = comms_.view(op.comm, u.rank);
  const graph::CommTable& table = graph_.comms();
  const std::int32_t self_idx = table.indexOf(op.comm, u.rank);
  const std::int32_t peer_idx =
      op.peer >= 0 && op.peer < graph_.worldSize() ? table.indexOf(op.comm, op.peer) : -1;
  if (self_idx < 0 || peer_idx < 0)
    throw InputError(
        fmt::format("graph: rank {} op {}: {} with peer {} on communicator {}, "
                    "which does not hold both ranks",
                    u.rank, op_index, opName(op.kind), op.peer, op.comm));
  const bool is_send = op.kind == graph::OpKind::Send;
  const std::int32_t dist = is_send ? peer_idx - self_idx : self_idx - peer_idx;
  const std::int32_t delta = ((dist % v.size) + v.size) % v.size;
  const std::int32_t peer_unit = comms_.unitOf(op.peer);
  const P2PKey key{is_send ? u.unit : peer_unit,
                   is_send ? peer_unit : u.unit,
                   v.sync_key,
                   delta,
                   op.tag,
                   u.iteration};
  const bool same_node = comms_.nodeOf(u.rank) == comms_.nodeOf(op.peer);

  const std::int32_t id = newOp();
  CommOp& c = ops_[static_cast<std::size_t>(id)];
  c.active = true;
  c.p2p = true;
  c.is_send = is_send;
  c.launch = launch_id;
  c.unit = u.unit;
  c.op_index = op_index;
  c.view = &v;
  c.arrival = c.start = t;
  c.cost = usToNs(cost_.p2pUs(op.bytes, same_node));
  c.p2p_key = key;

  P2PSlot& slot = p2p_[key];
  TimeNs& mine = is_send ? slot.send : slot.recv;
  const TimeNs other = is_send ? slot.recv : slot.send;
  mine = t;
  if (other < 0) {
    (is_send ? slot.send_op : slot.recv_op) = id;
    return;
  }
  // Both sides are here: the transfer runs now for both.
  const std::int32_t waiter = is_send ? slot.recv_op : slot.send_op;
  p2p_.erase(key);
  const TimeNs start = std::max(t, other);
  finishOp(id, start, start + ops_[static_cast<std::size_t>(id)].cost);
  if (waiter >= 0) finishOp(waiter, start, start + ops_[static_cast<std::size_t>(waiter)].cost);
}

void Engine::finishOp(std::int32_t id, TimeNs start, TimeNs end) {
  const CommOp c = ops_[static_cast<std::size_t>(id)];
  ops_[static_cast<std::size_t>(id)].active = false;
  free_ops_.push_back(id);
  UnitState& u = units_[static_cast<std::size_t>(c.unit)];
  const graph::Op& op = u.ops[c.op_index];
  Launch& l = launches_[static_cast<std::size_t>(c.launch)];
  u.intervals.push_back(Interval{start, end, l.iteration, false});
  if (!c.p2p || c.is_send) recordStat(c, op);
  if (!u.traced.empty())
    recordTrace(u, op, c.arrival, start, end, l.iteration, comms_.familyName(c.view->family));
  l.end = std::max(l.end, end);
  if (--l.remaining == 0) finishLaunch(c.launch);
}

void Engine::finishLaunch(std::int32_t launch_id) {
  Launch& l = launches_[static_cast<std::size_t>(launch_id)];
  UnitState& u = units_[static_cast<std::size_t>(l.unit)];
  for (std::uint8_t s : l.streams) {
    if (u.pending[s] != launch_id) continue;
    u.pending[s] = -1;
    u.ready[s] = std::max(u.ready[s], l.end);
  }
  if (u.blocked && !u.scheduled) {
    u.scheduled = true;
    queue_.push(std::max(now_, l.end), u.unit);
  }
  free_launches_.push_back(launch_id);
}

}  // namespace crystal::replay::detail
