#include "closed_form.h"

#include <algorithm>
#include <array>

namespace crystal::model {
namespace {

// Path cost with j dependency edges (j+1 hops including the final delivery).
double ringPathCost(const RingRun& r, long j) {
  const double ts = r.slice_bytes;
  const long k = j + 1;
  const double tail = static_cast<double>(r.units() - 1 - j * r.slices);
  if (!r.has_net || r.period == 1) {
    const Hop& h = r.has_net ? r.net : r.nvl;
    return static_cast<double>(k) * (h.alpha_us + h.tx(ts)) + tail * h.tx(ts);
  }
  const double wn = r.net.alpha_us + r.net.tx(ts);
  const double wv = r.nvl.alpha_us + r.nvl.tx(ts);
  double best = 0;
  // k consecutive hops hold floor(k/p) or ceil(k/p) NET hops depending on alignment.
  const std::array<long, 2> counts = {k / r.period, (k + r.period - 1) / r.period};
  for (long cn : counts) {
    const long cv = k - cn;
    const double t_max = std::max(cn > 0 ? r.net.tx(ts) : 0.0, cv > 0 ? r.nvl.tx(ts) : 0.0);
    best =
        std::max(best, static_cast<double>(cn) * wn + static_cast<double>(cv) * wv + tail * t_max);
  }
  return best;
}

}  // namespace

double ringClosedForm(const RingRun& r) {
  const long jmax = r.loops * static_cast<long>(r.steps - 1);
  // The cost is linear in j plus a staircase of period `period`: its maximum lies within
  // one period of either end of [0, jmax].
  const long edge = 2L * r.period + 2;
  double best = 0;
  for (long j = 0; j <= std::min(jmax, edge); ++j) best = std::max(best, ringPathCost(r, j));
  for (long j = std::max(0L, jmax - edge); j <= jmax; ++j) {
    best = std::max(best, ringPathCost(r, j));
  }
  return best;
}

double chainClosedForm(const ChainRun& c) {
  const double sv = c.nvl.tx(c.unit_bytes);
  const double sn = c.net.tx(c.unit_bytes);
  if (c.nvl_hops + c.net_hops == 0) return 0;
  double max_s = 0;
  if (c.nvl_hops > 0) max_s = std::max(max_s, sv);
  if (c.net_hops > 0) max_s = std::max(max_s, sn);
  return c.nvl_hops * (sv + c.nvl.alpha_us) + c.net_hops * (sn + c.net.alpha_us) +
         static_cast<double>(c.units - 1) * c.share * max_s;
}

namespace {

// Longest path from unit 0 at rank s (arriving at `offset`) to the delivery of the last unit
// to rank s+d+1: j dependency edges (j = d + k*n <= jmax), serial sends on the slowest
// sender visited. Senders s..s+j; position q % period == period-1 sends over the NET.
double pathFrom(const RingRun& r, long n, long jmax, long s, long d, double offset) {
  if (d > jmax) return -1;
  const double ts = r.slice_bytes;
  const bool mixed = r.has_net && r.period > 1;
  const Hop& only = r.has_net ? r.net : r.nvl;
  auto cost = [&](long j) {
    const double tail = static_cast<double>(r.units() - 1 - j * r.slices);
    if (!mixed) return (j + 1) * (only.alpha_us + only.tx(ts)) + tail * only.tx(ts);
    const long p = r.period;
    // Multiples of p shifted by p-1 in [s, s+j]: NET senders on the path.
    auto upto = [&](long x) { return x < p - 1 ? 0 : (x - (p - 1)) / p + 1; };
    const long cn = upto(s + j) - upto(s - 1);
    const long cv = j + 1 - cn;
    const double t_max = std::max(cn > 0 ? r.net.tx(ts) : 0.0, cv > 0 ? r.nvl.tx(ts) : 0.0);
    return cn * (r.net.alpha_us + r.net.tx(ts)) + cv * (r.nvl.alpha_us + r.nvl.tx(ts)) +
           tail * t_max;
  };
  const long j_hi = d + n * ((jmax - d) / n);
  return offset + std::max(cost(d), cost(j_hi));
}

}  // namespace

std::vector<double> ringFinishByClass(const RingRun& r, int nranks,
                                      std::span<const StartClass> classes) {
  const long n = nranks;
  const long jmax = r.loops * static_cast<long>(r.steps - 1);
  // The path cost is linear in the distance plus a term periodic in the ring position, so
  // the extremes over a block of equal arrivals lie within one period of its ends: we
  // visit the first and last period+1 members of every block.
  const long win = r.period + 1;
  std::vector<long> first(classes.size());
  long pos = 0;
  for (std::size_t i = 0; i < classes.size(); ++i) {
    first[i] = pos;
    pos += classes[i].count;
  }
  auto members = [&](std::size_t i) {
    std::vector<long> out;
    const long c = classes[i].count;
    for (long k = 0; k < std::min(c, win); ++k) out.push_back(first[i] + k);
    for (long k = std::max(win, c - win); k < c; ++k) out.push_back(first[i] + k);
    return out;
  };
  std::vector<std::vector<long>> edge(classes.size());
  for (std::size_t i = 0; i < classes.size(); ++i) edge[i] = members(i);
  std::vector<double> finish(classes.size(), 0.0);
  for (std::size_t dst = 0; dst < classes.size(); ++dst) {
    double best = 0;
    for (long rank : edge[dst]) {
      for (std::size_t src = 0; src < classes.size(); ++src) {
        for (long s : edge[src]) {
          const long d = (((rank - s - 1) % n) + n) % n;
          best = std::max(best, pathFrom(r, n, jmax, s, d, classes[src].offset_us));
        }
        // The source just upstream of this rank, if it lies inside the block.
        const long up = ((rank - 1) % n + n) % n;
        if (up >= first[src] && up < first[src] + classes[src].count) {
          best = std::max(best, pathFrom(r, n, jmax, up, 0, classes[src].offset_us));
        }
      }
    }
    finish[dst] = best;
  }
  return finish;
}

double textbookRing(Func f, int n, double bytes, double alpha_us, double us_per_byte) {
  const double steps = f == Func::AllReduce ? 2.0 * (n - 1) : n - 1.0;
  return steps * (alpha_us + us_per_byte * bytes / n);
}

double textbookTree(int depth, double bytes, double alpha_us, double us_per_byte) {
  return 2.0 * depth * alpha_us + 2.0 * us_per_byte * bytes;
}

}  // namespace crystal::model
