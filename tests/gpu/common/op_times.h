// The spread of one timed loop's operations: a device program records a CUDA event after
// each operation and passes the times between consecutive events here, so a mean that moved
// from run to run can be told apart: a few slow operations (and where in the loop they fell)
// against all of them a little slower. Header-only and free of CUDA:
// tests/gpu/common/op_times_test.cc checks it on the CPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

namespace gpu_check {

struct OpTimesSummary {
  double mean = 0, min = 0, median = 0, max = 0;
  // The mean without the `top` slowest: what the loop would read had they run at the rest's
  // pace (the `top` slowest' share of the mean is mean - rest_mean).
  double rest_mean = 0;
  std::vector<std::size_t> slowest;  // indexes into the loop, slowest first
};

// `us`: each operation's time in loop order. `top` slowest named (at most us.size() - 1, so
// the rest's mean is defined).
inline OpTimesSummary summarizeOpTimes(const std::vector<double>& us, std::size_t top = 3) {
  OpTimesSummary s;
  if (us.empty()) return s;
  const std::size_t n = us.size();
  // Slowest first; among equal times the earlier operation first (a stable, testable order).
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return us[a] > us[b]; });
  const double total = std::accumulate(us.begin(), us.end(), 0.0);
  s.mean = total / static_cast<double>(n);
  s.max = us[order.front()];
  s.min = us[order.back()];
  // The middle of the descending order is the median either way round.
  s.median = n % 2 == 1 ? us[order[n / 2]] : (us[order[n / 2 - 1]] + us[order[n / 2]]) / 2;
  top = std::min(top, n - 1);
  s.slowest.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top));
  double slow_sum = 0;
  for (const std::size_t i : s.slowest) slow_sum += us[i];
  s.rest_mean = (total - slow_sum) / static_cast<double>(n - top);
  return s;
}

// "min A median B max C; without the 3 slowest (#i T, #j T, #k T) D": times in us, one decimal.
inline std::string formatOpTimes(const std::vector<double>& us, std::size_t top = 3) {
  const OpTimesSummary s = summarizeOpTimes(us, top);
  if (us.empty()) return "no operations";
  char buf[128];
  std::snprintf(buf, sizeof buf, "min %.1f median %.1f max %.1f", s.min, s.median, s.max);
  std::string text = buf;
  if (s.slowest.empty()) return text;
  text += "; without the " + std::to_string(s.slowest.size()) + " slowest (";
  for (std::size_t k = 0; k < s.slowest.size(); ++k) {
    std::snprintf(buf, sizeof buf, "%s#%zu %.1f", k == 0 ? "" : ", ", s.slowest[k],
                  us[s.slowest[k]]);
    text += buf;
  }
  std::snprintf(buf, sizeof buf, ") %.1f", s.rest_mean);
  return text + buf;
}

}  // namespace gpu_check
