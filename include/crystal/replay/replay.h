// Discrete-event replay of an execution graph with every rank virtual (`crystal simulate`).
//
// Each simulated unit runs its op stream in program order, the way a rank's host thread
// enqueues work: compute occupies its stream; Record/Wait order streams; a collective
// starts when its last member has arrived and then takes the cost model's time; a send and
// its matching receive start when both are posted; ops between GroupBegin/GroupEnd are
// launched together and the launch ends with its last op. A unit only stops where it needs
// a time not known yet (an op behind an unfinished communication on the same stream).
//
// Symmetric mode simulates one representative per equivalence class of ranks
// (Graph::classOf): a member of another class is taken to arrive when that class's
// representative arrives at its corresponding op (same comm family, same sequence number),
// so the cost grows with classes x ops, not world size. Naive mode simulates every rank and
// is the reference the symmetric mode is tested against on small worlds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "crystal/graph/graph.h"
#include "crystal/model/nccl_model.h"
#include "crystal/replay/cost_model.h"
#include "crystal/replay/event_queue.h"

namespace crystal::replay {

enum class ReplayMode { Symmetric, Naive };

struct ReplayOptions {
  ReplayMode mode = ReplayMode::Symmetric;
  int iterations = 1;                     // the graph's stream is replayed this many times
  std::vector<std::int32_t> trace_ranks;  // global ranks whose timeline is recorded
  // Called about every `progress_every` unit runs with (ops executed, ops to execute).
  std::function<void(std::uint64_t, std::uint64_t)> progress;
  std::uint64_t progress_every = 1u << 10;
};

// One iteration of one unit. compute: time any compute op runs; exposed_comm: time a
// transfer runs with no compute running; bubble: the rest (idle or waiting for peers).
struct IterationStats {
  TimeNs time = 0;
  TimeNs compute = 0;
  TimeNs exposed_comm = 0;
  TimeNs bubble = 0;
};

struct UnitResult {
  std::int32_t unit = 0;   // class (symmetric) or rank (naive)
  std::int32_t cls = 0;    // equivalence class
  std::int32_t rank = 0;   // the simulated rank (class representative in symmetric mode)
  std::int64_t ranks = 1;  // ranks it stands for
  std::vector<IterationStats> iterations;
  TimeNs end = 0;                 // when its last op ends
  std::uint64_t peak_memory = 0;  // bytes, running sum of Alloc/Free in program order
  std::uint64_t ops = 0;          // ops executed (all iterations)
};

// Aggregate of identical calls (same kind, family, size, choice) over simulated units.
struct CollectiveStat {
  graph::CollKind kind = graph::CollKind::AllReduce;
  bool p2p = false;  // a Send/Recv pair rather than a collective
  std::string family;
  std::int32_t nranks = 0;
  std::uint64_t bytes = 0;
  model::Algo algo = model::Algo::Ring;
  model::Proto proto = model::Proto::Simple;
  int channels = 0;
  TimeNs time = 0;          // modelled time of one call, once all members are there
  std::uint64_t calls = 0;  // issued by simulated units
};

struct TraceSpan {
  std::int32_t rank = 0;  // the traced global rank
  std::uint8_t stream = 0;
  graph::OpKind kind = graph::OpKind::Compute;
  graph::CollKind coll = graph::CollKind::AllReduce;
  TimeNs posted = 0;  // when the op was ready to go on its stream
  TimeNs start = 0;   // when it ran (communication: all members there)
  TimeNs end = 0;
  std::uint64_t bytes = 0;
  std::int32_t peer = -1;
  std::string_view name;    // graph string table
  std::string_view family;  // communication only
  int iteration = 0;
};

struct ReplayResult {
  ReplayMode mode = ReplayMode::Symmetric;
  std::int32_t world = 0;
  std::vector<UnitResult> units;
  std::vector<CollectiveStat> collectives;
  std::vector<TraceSpan> trace;
  std::uint64_t events = 0;
  std::uint64_t model_calls = 0;  // distinct cost-model questions asked
  // Symmetric mode: communication ops whose peer class never arrived at the matching op
  // (the graph's classes are not symmetric for them); they were timed from the side that
  // did arrive. Always 0 on a symmetric graph.
  std::uint64_t uncoupled_ops = 0;
  double wall_seconds = 0;

  // The unit that stands for `rank`.
  [[nodiscard]] const UnitResult& unitOf(const graph::Graph& g, std::int32_t rank) const;
};

// Replays `g`. Throws InputError on an inconsistent graph (a Wait on an event never
// recorded, a deadlock such as a collective some member never reaches), naming the rank
// and op index.
[[nodiscard]] ReplayResult runReplay(const graph::Graph& g, const CostModel& cost,
                                     const ReplayOptions& opts);

}  // namespace crystal::replay
