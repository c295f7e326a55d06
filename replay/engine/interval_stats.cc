// Union lengths of busy intervals: compute, and compute-or-transfer. Exposed communication
// is what transfers add to the busy time beyond compute; the bubble is the idle rest.
#include "interval_stats.h"

#include <algorithm>

namespace crystal::replay::detail {
namespace {

// Length of the union of [start, end) intervals, sorted by start.
TimeNs unionLength(const std::vector<Interval>& sorted, bool compute_only) {
  TimeNs total = 0;
  TimeNs cur_start = 0, cur_end = 0;
  bool open = false;
  for (const Interval& iv : sorted) {
    if (compute_only && !iv.compute) continue;
    if (iv.end <= iv.start) continue;
    if (!open || iv.start > cur_end) {
      if (open) total += cur_end - cur_start;
      cur_start = iv.start;
      cur_end = iv.end;
      open = true;
    } else {
      cur_end = std::max(cur_end, iv.end);
    }
  }
  if (open) total += cur_end - cur_start;
  return total;
}

}  // namespace

std::vector<IterationStats> iterationStats(const std::vector<TimeNs>& marks,
                                           std::vector<Interval> intervals) {
  std::vector<IterationStats> out;
  if (marks.size() < 2) return out;
  out.resize(marks.size() - 1);
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) {
    return a.iteration != b.iteration ? a.iteration < b.iteration : a.start < b.start;
  });
  auto it = intervals.begin();
  std::vector<Interval> one;
  for (std::size_t i = 0; i < out.size(); ++i) {
    one.clear();
    while (it != intervals.end() && it->iteration == static_cast<int>(i)) one.push_back(*it++);
    IterationStats& s = out[i];
    s.time = marks[i + 1] - marks[i];
    s.compute = unionLength(one, true);
    const TimeNs busy = unionLength(one, false);
    s.exposed_comm = busy - s.compute;
    s.bubble = std::max<TimeNs>(0, s.time - busy);
  }
  return out;
}

}  // namespace crystal::replay::detail
