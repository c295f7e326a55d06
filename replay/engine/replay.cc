// The event loop of the replay and the result it hands back.
//
// Events are "unit u may make progress at time t". A unit runs until it blocks; whatever
// unblocks it (a launch ending) schedules it again at the launch's end time. Times are a
// pure function of the graph and the cost model (max-plus over dependencies), so the order
// in which units run changes nothing but is still deterministic.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "engine.h"
#include "names.h"

namespace crystal::replay {

namespace detail {

Engine::Engine(const graph::Graph& g, const CostModel& cost, const ReplayOptions& opts)
    : graph_(g), cost_(cost), opts_(opts), comms_(g, opts.mode) {
  if (opts.iterations < 1)
    throw InputError(fmt::format("simulate: iterations must be >= 1 (got {})", opts.iterations));
  const std::int32_t world = g.worldSize();
  const bool naive = opts.mode == ReplayMode::Naive;
  const std::int32_t n = naive ? world : g.numClasses();
  units_.resize(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) {
    UnitState& u = units_[static_cast<std::size_t>(i)];
    u.unit = i;
    u.rank = naive ? i : g.representative(i);
    u.cls = naive ? g.classOf(i) : i;
    u.ranks = naive ? 1 : g.classSize(i);
    u.marks.push_back(0);
    g.materialize(u.rank, u.ops);
  }
  for (std::int32_t r : opts.trace_ranks) {
    if (r < 0 || r >= world)
      throw InputError(
          fmt::format("simulate: --ranks: rank {} is outside the world (0..{})", r, world - 1));
    units_[static_cast<std::size_t>(comms_.unitOf(r))].traced.push_back(r);
  }
}

void Engine::recordStat(const CommOp& c, const graph::Op& op) {
  const StatKey key{c.p2p,
                    static_cast<int>(op.coll),
                    c.view->family,
                    c.view->size,
                    op.bytes,
                    static_cast<int>(c.choice.algo),
                    static_cast<int>(c.choice.proto),
                    c.choice.channels};
  auto [it, fresh] = stat_index_.emplace(key, result_.collectives.size());
  if (fresh) {
    CollectiveStat s;
    s.kind = op.coll;
    s.p2p = c.p2p;
    s.family = std::string(comms_.familyName(c.view->family));
    s.nranks = c.view->size;
    s.bytes = op.bytes;
    s.algo = c.choice.algo;
    s.proto = c.choice.proto;
    s.channels = c.choice.channels;
    s.time = c.cost;
    result_.collectives.push_back(std::move(s));
  }
  ++result_.collectives[it->second].calls;
}

void Engine::recordTrace(const UnitState& u, const graph::Op& op, TimeNs posted, TimeNs start,
                         TimeNs end, int iteration, std::string_view family) {
  for (std::int32_t r : u.traced) {
    TraceSpan s;
    s.rank = r;
    s.stream = op.stream;
    s.kind = op.kind;
    s.coll = op.coll;
    s.posted = posted;
    s.start = start;
    s.end = end;
    s.bytes = op.bytes;
    s.peer = r == u.rank ? op.peer : -1;  // another class member's peers are renamed
    s.name = graph_.name(op.name);
    s.family = family;
    s.iteration = iteration;
    result_.trace.push_back(s);
  }
}

// Symmetric mode only: communication that can never match because the graph's classes are
// not symmetric for it is timed from the side(s) that did arrive, so the replay finishes.
void Engine::forceStalled() {
  std::vector<std::int32_t> stalled;
  for (std::size_t i = 0; i < ops_.size(); ++i)
    if (ops_[i].active) stalled.push_back(static_cast<std::int32_t>(i));
  for (std::int32_t id : stalled) {
    CommOp& c = ops_[static_cast<std::size_t>(id)];
    if (!c.active) continue;  // finished by an earlier forced op
    if (c.p2p) {
      auto it = p2p_.find(c.p2p_key);
      if (it != p2p_.end()) (c.is_send ? it->second.send_op : it->second.recv_op) = -1;
    } else {
      const CollKey k{c.view->member_units[c.cursor], c.view->sync_key, c.seq};
      auto it = coll_waiters_.find(k);
      if (it != coll_waiters_.end()) std::erase(it->second, id);
    }
    ++result_.uncoupled_ops;
    finishOp(id, c.start, c.start + c.cost);
  }
}

ReplayResult Engine::run() {
  const auto wall0 = std::chrono::steady_clock::now();
  for (UnitState& u : units_) {
    u.scheduled = true;
    queue_.push(0, u.unit);
  }
  std::size_t done = 0;
  std::uint64_t since_progress = 0, total_ops = 0;
  for (const UnitState& u : units_)
    total_ops += u.ops.size() * static_cast<std::uint64_t>(opts_.iterations);
  for (;;) {
    while (!queue_.empty()) {
      const auto e = queue_.pop();
      now_ = e.time;
      UnitState& u = units_[static_cast<std::size_t>(e.payload)];
      u.scheduled = false;
      u.blocked = false;
      step(u);
      if (u.done) ++done;
      if (opts_.progress && ++since_progress >= opts_.progress_every) {
        since_progress = 0;
        std::uint64_t executed = 0;
        for (const UnitState& v : units_) executed += v.executed;
        opts_.progress(executed, total_ops);
      }
    }
    if (done == units_.size()) break;
    const auto stuck =
        std::find_if(units_.begin(), units_.end(), [](const UnitState& u) { return !u.done; });
    if (opts_.mode == ReplayMode::Naive || free_ops_.size() == ops_.size()) {
      const graph::Op& op = stuck->ops[std::min(stuck->pc, stuck->ops.size() - 1)];
      throw InputError(fmt::format(
          "graph: deadlock: rank {} waits at op {} ({} on communicator {}) for peers that "
          "never reach the matching call",
          stuck->rank, stuck->pc, opName(op.kind), op.comm));
    }
    forceStalled();
  }
  if (result_.uncoupled_ops > 0)
    CRYSTAL_WARN(
        "replay: {} communication ops had no matching op in their peer class; timed "
        "from the arriving side",
        result_.uncoupled_ops);

  result_.mode = opts_.mode;
  result_.world = graph_.worldSize();
  for (UnitState& u : units_) {
    UnitResult r;
    r.unit = u.unit;
    r.cls = u.cls;
    r.rank = u.rank;
    r.ranks = u.ranks;
    r.end = u.marks.back();
    r.peak_memory = u.peak;
    r.ops = u.executed;
    r.iterations = iterationStats(u.marks, std::move(u.intervals));
    result_.units.push_back(std::move(r));
    u.ops = {};
  }
  result_.events = queue_.pushed();
  result_.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return std::move(result_);
}

}  // namespace detail

const UnitResult& ReplayResult::unitOf(const graph::Graph& g, std::int32_t rank) const {
  return units[static_cast<std::size_t>(mode == ReplayMode::Naive ? rank : g.classOf(rank))];
}

ReplayResult runReplay(const graph::Graph& g, const CostModel& cost, const ReplayOptions& opts) {
  detail::Engine engine(g, cost, opts);
  return engine.run();
}

}  // namespace crystal::replay
