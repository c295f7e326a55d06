// Closed forms of the step-level recurrences in pipeline.h (alpha-beta with pipelining):
// the longest path through the max-plus recurrence, evaluated in O(ranks per node).
//
// Ring, U units of S slices per step, hop latency a_h and per-unit time t_h, w_h = a_h+t_h:
//   T = max over j in [0, J] of  W(j+1) + (U - 1 - j*S) * t_max
// where a path takes j data-dependency edges (each one hop along the ring: w) and the rest
// of its U-1 units as back-to-back sends on the slowest link (t_max); J = loops * (steps-1)
// and W(k) is the largest sum of w over k consecutive ring hops. With one hop type this is
// the textbook pipelined ring: bandwidth-bound  T = U*t + a  when w <= S*t, else
// latency-bound  T = (J+1)*w + (U-1-J*S)*t.
// Chain (tandem line of hops, transfer s_h, latency a_h, link busy share*s_h), C chunks:
//   T = sum_h (s_h + a_h) + (C - 1) * share * max_h s_h.
#pragma once

#include <span>
#include <vector>

#include "crystal/model/nccl_model.h"
#include "steps.h"

namespace crystal::model {

[[nodiscard]] double ringClosedForm(const RingRun& run);
[[nodiscard]] double chainClosedForm(const ChainRun& run);

// Members in contiguous ring blocks arriving at `offset_us`: when each block has received
// everything (us after the earliest arrival): the longest path of the recurrence from
// every block's arrival, evaluated at the block edges, O(blocks^2 x period^2).
[[nodiscard]] std::vector<double> ringFinishByClass(const RingRun& run, int nranks,
                                                    std::span<const StartClass> classes);

// Textbook alpha-beta forms (no pipelining), for documentation and sanity tests:
// ring all-reduce 2(n-1)(a + b*m/n), all-gather / reduce-scatter (n-1)(a + b*m/n),
// tree all-reduce 2*depth*a + 2*b*m (m = bytes, b = us per byte of the bottleneck link).
[[nodiscard]] double textbookRing(Func f, int n, double bytes, double alpha_us, double us_per_byte);
[[nodiscard]] double textbookTree(int depth, double bytes, double alpha_us, double us_per_byte);

}  // namespace crystal::model
