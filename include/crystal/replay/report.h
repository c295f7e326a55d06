// What `crystal simulate` prints and writes from a ReplayResult.
//
//   summaryTable      one row per rank class: iteration time, compute, exposed
//                     communication, bubble, peak memory (mean over iterations)
//   collectiveTable   one row per distinct call (kind, communicator family, size, NCCL
//                     algorithm/protocol/channels): modelled time, calls, total
//   summaryJson       both, machine-readable (--json)
//   chromeTrace       Chrome-trace / Perfetto JSON of the traced ranks (--trace)
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "crystal/graph/graph.h"
#include "crystal/replay/replay.h"

namespace crystal::replay {

// Per rank class; in naive mode the class's slowest rank stands for it.
struct ClassSummary {
  std::int32_t cls = 0;
  std::int32_t rank = 0;   // rank whose numbers are shown
  std::int64_t ranks = 0;  // ranks in the class
  IterationStats mean;     // over iterations
  std::uint64_t peak_memory = 0;
};

[[nodiscard]] std::vector<ClassSummary> summarizeClasses(const graph::Graph& g,
                                                         const ReplayResult& r);
[[nodiscard]] std::string summaryTable(const graph::Graph& g, const ReplayResult& r);
// The `top` rows with the largest total time (time x calls); 0 = all.
[[nodiscard]] std::string collectiveTable(const ReplayResult& r, std::size_t top);
[[nodiscard]] nlohmann::json summaryJson(const graph::Graph& g, const ReplayResult& r);
[[nodiscard]] nlohmann::json chromeTrace(const ReplayResult& r);

}  // namespace crystal::replay
