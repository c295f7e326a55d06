// What `crystal graph inspect --rank R` prints: op counts, bytes per communicator, compute
// time and peak memory of one rank's stream.
#pragma once

#include <array>
#include <cstdint>
#include <map>

#include "crystal/graph/graph.h"

namespace crystal::graph {

struct CommTraffic {
  std::uint64_t ops = 0;
  std::uint64_t bytes = 0;  // collective tuning size or p2p payload, summed
};

struct RankSummary {
  std::int32_t rank = 0;
  std::int32_t cls = 0;
  std::uint64_t ops = 0;
  std::array<std::uint64_t, 11> ops_by_kind{};  // index = OpKind
  double compute_us = 0;                        // sum of Compute durations
  std::uint64_t peak_memory = 0;                // max running Alloc - Free
  std::uint64_t static_memory = 0;              // allocated before the first IterationMark
  std::map<std::int32_t, CommTraffic> by_comm;  // comm id -> traffic
};

[[nodiscard]] RankSummary summarizeRank(const Graph& g, std::int32_t rank);

}  // namespace crystal::graph
