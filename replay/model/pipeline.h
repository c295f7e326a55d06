// Step-level timing of one collective as NCCL executes it: max-plus recurrences over the
// steps of one channel. All members of a ring are alike up to their position in the node,
// so the recurrence keeps one representative per position (period = ranks per node), and
// its cost is O(period x steps), independent of the number of nodes.
//
// Ring: unit u = (loop, step, slice) on each rank; start(c,u) is when position c starts
// sending unit u:
//   start(c,u) = max( start(c,u-1) + tx_c,                       link busy with u-1
//                     start(c-1,u-S) + tx_{c-1} + alpha_{c-1} )   data from predecessor
// where S = slices per step and the second term exists for steps > 0 of a loop; the call
// ends when the last unit has arrived: max_c start(c,U-1) + tx_c + alpha_c.
// Chain (tree up+down, broadcast): a tandem of hops every chunk passes in order; hop h
// takes tx_h + alpha_h per chunk and accepts the next chunk share x tx_h later.
#pragma once

#include <span>
#include <vector>

#include "steps.h"

namespace crystal::model {

[[nodiscard]] double ringRecurrence(const RingRun& run);
[[nodiscard]] double chainRecurrence(const ChainRun& run);

// Ring of n members (position r % period in its node) that arrive at different times:
// brute-force per-rank recurrence, O(n x units). Reference for ringFinishByClass (tests).
[[nodiscard]] std::vector<double> ringRecurrencePerRank(const RingRun& run, int nranks,
                                                        std::span<const double> start_us);

}  // namespace crystal::model
