// Per-iteration time breakdown of one unit from the intervals its ops occupied.
#pragma once

#include <vector>

#include "crystal/replay/replay.h"

namespace crystal::replay::detail {

struct Interval {
  TimeNs start = 0;
  TimeNs end = 0;
  int iteration = 0;
  bool compute = false;  // otherwise a transfer (communication running, all members there)
};

// `marks` holds iteration boundaries (iterations + 1 entries). Intervals may come in any
// order; each belongs to the iteration it was issued in.
[[nodiscard]] std::vector<IterationStats> iterationStats(const std::vector<TimeNs>& marks,
                                                         std::vector<Interval> intervals);

}  // namespace crystal::replay::detail
