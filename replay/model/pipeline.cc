#include "pipeline.h"

#include <algorithm>
#include <vector>

namespace crystal::model {

double ringRecurrence(const RingRun& run) {
  const int classes = run.period;
  const int s = run.slices;
  const long units = run.units();
  const long per_loop = static_cast<long>(run.steps) * s;
  // Rolling window of the last s+1 start times per class: slot u % (s+1).
  const int w = s + 1;
  std::vector<double> start(static_cast<std::size_t>(classes) * w, 0.0);
  auto at = [&](int c, long u) -> double& {
    return start[static_cast<std::size_t>(c) * w + static_cast<std::size_t>(u % w)];
  };
  std::vector<double> prev_class_dep(classes, 0.0);
  for (long u = 0; u < units; ++u) {
    const bool has_dep = (u % per_loop) >= s;  // step > 0 within the loop
    // Dependencies read values of unit u-s (other class) and u-1 (own class) before this
    // unit overwrites slot u % w (u-s-1 lives there, no longer needed).
    for (int c = 0; c < classes; ++c) {
      const int pred = (c + classes - 1) % classes;
      prev_class_dep[c] =
          has_dep ? at(pred, u - s) + run.hopOf(pred).tx(run.slice_bytes) + run.hopOf(pred).alpha_us
                  : 0.0;
    }
    for (int c = 0; c < classes; ++c) {
      const double serial = u > 0 ? at(c, u - 1) + run.hopOf(c).tx(run.slice_bytes) : 0.0;
      at(c, u) = std::max(serial, prev_class_dep[c]);
    }
  }
  double end = 0;
  for (int c = 0; c < classes; ++c) {
    const Hop& h = run.hopOf(c);
    end = std::max(end, at(c, units - 1) + h.tx(run.slice_bytes) + h.alpha_us);
  }
  return end;
}

double chainRecurrence(const ChainRun& run) {
  // Hops in path order: NVLink chain up, NET levels up, NET levels down, NVLink down. The
  // order does not change the result of a tandem line; we keep the physical one.
  std::vector<Hop> hops;
  hops.insert(hops.end(), static_cast<std::size_t>(run.nvl_hops / (run.share > 1 ? 2 : 1)),
              run.nvl);
  hops.insert(hops.end(), static_cast<std::size_t>(run.net_hops), run.net);
  if (run.share > 1) {
    hops.insert(hops.end(), static_cast<std::size_t>(run.nvl_hops - run.nvl_hops / 2), run.nvl);
  }
  if (hops.empty()) return 0;
  // done[h] = time chunk u has crossed hop h; a hop serves one chunk at a time.
  std::vector<double> busy_until(hops.size(), 0.0);
  double last = 0;
  for (long u = 0; u < run.units; ++u) {
    double ready = 0;  // chunk u is at the source from the start
    for (std::size_t h = 0; h < hops.size(); ++h) {
      const double tx = hops[h].tx(run.unit_bytes);
      const double start = std::max(ready, busy_until[h]);
      busy_until[h] = start + run.share * tx;
      ready = start + tx + hops[h].alpha_us;
    }
    last = ready;
  }
  return last;
}

std::vector<double> ringRecurrencePerRank(const RingRun& run, int nranks,
                                          std::span<const double> start_us) {
  const int s = run.slices;
  const long units = run.units();
  const long per_loop = static_cast<long>(run.steps) * s;
  // Rank r sits at position r % period of its node; its hop is that position's.
  auto hop = [&](int r) -> const Hop& { return run.hopOf(r % run.period); };
  std::vector<std::vector<double>> st(nranks, std::vector<double>(units, 0.0));
  for (long u = 0; u < units; ++u) {
    for (int r = 0; r < nranks; ++r) {
      double t = start_us[r];
      if (u > 0) t = std::max(t, st[r][u - 1] + hop(r).tx(run.slice_bytes));
      if ((u % per_loop) >= s) {
        const int pred = (r + nranks - 1) % nranks;
        t = std::max(t, st[pred][u - s] + hop(pred).tx(run.slice_bytes) + hop(pred).alpha_us);
      }
      st[r][u] = t;
    }
  }
  std::vector<double> finish(nranks);
  for (int r = 0; r < nranks; ++r) {
    const int pred = (r + nranks - 1) % nranks;
    finish[r] = st[pred][units - 1] + hop(pred).tx(run.slice_bytes) + hop(pred).alpha_us;
  }
  return finish;
}

}  // namespace crystal::model
