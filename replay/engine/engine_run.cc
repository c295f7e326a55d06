// A unit's walk over its stream in program order, as its host thread would enqueue work.
// The walk stops only where it needs a time that is not known yet: an op behind unfinished
// communication on the same stream, or an iteration boundary while communication is in
// flight. Everything else (memory, other streams) carries on, so overlap of compute and
// communication falls out of per-stream ready times.
#include <fmt/format.h>

#include <algorithm>

#include "crystal/base/error.h"
#include "engine.h"

namespace crystal::replay::detail {

using graph::OpKind;

std::size_t Engine::streamSlot(UnitState& u, std::uint8_t s) {
  if (s >= u.ready.size()) {
    // A stream first used now starts at the unit's last iteration boundary.
    u.ready.resize(s + 1u, u.marks.back());
    u.pending.resize(s + 1u, -1);
  }
  return s;
}

void Engine::block(UnitState& u) { u.blocked = true; }

// Synchronises all streams (an iteration ends when all its work has ended).
bool Engine::boundary(UnitState& u, bool final) {
  for (std::int32_t p : u.pending)
    if (p >= 0) return false;
  TimeNs t = u.marks.back();
  for (TimeNs r : u.ready) t = std::max(t, r);
  std::fill(u.ready.begin(), u.ready.end(), t);
  if (u.ops_since_mark) u.marks.push_back(t);
  u.ops_since_mark = false;
  if (final) u.done = true;
  return true;
}

bool Engine::launch(UnitState& u, const std::vector<std::size_t>& op_indices) {
  if (op_indices.empty()) return true;
  std::vector<std::uint8_t> streams;
  for (std::size_t i : op_indices) {
    const std::uint8_t s = u.ops[i].stream;
    const std::size_t slot = streamSlot(u, s);
    if (u.pending[slot] >= 0) return false;
    if (std::find(streams.begin(), streams.end(), s) == streams.end()) streams.push_back(s);
  }
  TimeNs t = 0;
  for (std::uint8_t s : streams) t = std::max(t, u.ready[s]);
  const std::int32_t id = newLaunch();
  Launch& l = launches_[static_cast<std::size_t>(id)];
  l.unit = u.unit;
  l.streams = streams;
  l.remaining = static_cast<int>(op_indices.size());
  l.end = t;
  l.iteration = static_cast<int>(u.marks.size()) - 1;
  for (std::uint8_t s : streams) u.pending[s] = id;
  // Ops of one launch start together; the launch (and its streams) ends with the last.
  for (std::size_t i : op_indices) {
    if (u.ops[i].kind == OpKind::Collective)
      startCollective(u, id, i, t);
    else
      startP2P(u, id, i, t);
  }
  return true;
}

void Engine::step(UnitState& u) {
  while (!u.done) {
    if (u.pc == u.ops.size()) {
      if (u.group_depth != 0)
        throw InputError(
            fmt::format("graph: rank {}: GroupBegin without GroupEnd before the "
                        "end of the stream",
                        u.rank));
      const bool last = u.iteration + 1 >= opts_.iterations;
      if (!boundary(u, last)) return block(u);
      if (last) return;
      ++u.iteration;
      u.pc = 0;
      continue;
    }
    const graph::Op& op = u.ops[u.pc];
    switch (op.kind) {
      case OpKind::Compute: {
        const std::size_t s = streamSlot(u, op.stream);
        if (u.pending[s] >= 0) return block(u);
        const TimeNs start = u.ready[s];
        const TimeNs end = start + usToNs(op.duration_us);
        u.ready[s] = end;
        const int it = static_cast<int>(u.marks.size()) - 1;
        u.intervals.push_back(Interval{start, end, it, true});
        if (!u.traced.empty()) recordTrace(u, op, start, start, end, it, {});
        break;
      }
      case OpKind::Record: {
        const std::size_t s = streamSlot(u, op.stream);
        if (u.pending[s] >= 0) return block(u);
        u.events[op.tag] = u.ready[s];
        break;
      }
      case OpKind::Wait: {
        const std::size_t s = streamSlot(u, op.stream);
        if (u.pending[s] >= 0) return block(u);
        auto ev = u.events.find(op.tag);
        if (ev == u.events.end())
          throw InputError(
              fmt::format("graph: rank {} op {}: Wait on event {} that was never "
                          "recorded",
                          u.rank, u.pc, op.tag));
        u.ready[s] = std::max(u.ready[s], ev->second);
        break;
      }
      case OpKind::Alloc:
        u.memory += static_cast<std::int64_t>(op.bytes);
        u.peak = std::max(u.peak, static_cast<std::uint64_t>(std::max<std::int64_t>(0, u.memory)));
        break;
      case OpKind::Free:
        u.memory -= static_cast<std::int64_t>(op.bytes);
        break;
      case OpKind::IterationMark:
        if (!boundary(u, false)) return block(u);
        break;
      case OpKind::GroupBegin:
        ++u.group_depth;
        break;
      case OpKind::GroupEnd:
        if (u.group_depth == 0)
          throw InputError(
              fmt::format("graph: rank {} op {}: GroupEnd without GroupBegin", u.rank, u.pc));
        if (u.group_depth == 1) {
          if (!launch(u, u.group)) return block(u);
          u.group.clear();
        }
        --u.group_depth;
        break;
      case OpKind::Collective:
      case OpKind::Send:
      case OpKind::Recv:
        if (u.group_depth > 0) {
          u.group.push_back(u.pc);
        } else if (!launch(u, {u.pc})) {
          return block(u);
        }
        break;
    }
    // Only work that takes time opens an iteration: allocations before the first
    // IterationMark (weights) belong to the iteration that follows.
    if (op.kind == OpKind::Compute || op.kind == OpKind::Collective || op.kind == OpKind::Send ||
        op.kind == OpKind::Recv)
      u.ops_since_mark = true;
    ++u.pc;
    ++u.executed;
  }
}

}  // namespace crystal::replay::detail
