#include "graph/rank_summary.h"

#include <algorithm>
#include <vector>

namespace crystal::graph {

RankSummary summarizeRank(const Graph& g, std::int32_t rank) {
  std::vector<Op> ops;
  g.materialize(rank, ops);
  RankSummary s;
  s.rank = rank;
  s.cls = g.classOf(rank);
  s.ops = ops.size();
  std::uint64_t mem = 0;  // wraps only on graphs validation rejects
  bool started = false;
  for (const Op& op : ops) {
    ++s.ops_by_kind[static_cast<std::size_t>(op.kind)];
    switch (op.kind) {
      case OpKind::Compute: s.compute_us += op.duration_us; break;
      case OpKind::Alloc:
        mem += op.bytes;
        s.peak_memory = std::max(s.peak_memory, mem);
        if (!started) s.static_memory += op.bytes;
        break;
      case OpKind::Free: mem -= std::min(mem, op.bytes); break;
      case OpKind::IterationMark: started = true; break;
      case OpKind::Collective:
      case OpKind::Send:
      case OpKind::Recv: {
        auto& t = s.by_comm[op.comm];
        ++t.ops;
        t.bytes += op.bytes;
        break;
      }
      default: break;
    }
  }
  return s;
}

}  // namespace crystal::graph
