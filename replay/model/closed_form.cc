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

std::vector<double> ringFinishByClass(const RingRun& r, int n,
                                      std::span<const StartClass> classes) {
  const double ts = r.slice_bytes;
  // One hop type (or the ring's average hop when NVLink and NET hops alternate).
  double w = 0;
  double tx = 0;
  if (!r.has_net || r.period == 1) {
    const Hop& h = r.has_net ? r.net : r.nvl;
    w = h.alpha_us + h.tx(ts);
    tx = h.tx(ts);
  } else {
    w = ((r.net.alpha_us + r.net.tx(ts)) + (r.period - 1) * (r.nvl.alpha_us + r.nvl.tx(ts))) /
        r.period;
    tx = std::max(r.net.tx(ts), r.nvl.tx(ts));
  }
  const long jmax = r.loops * static_cast<long>(r.steps - 1);
  const double kappa = w - r.slices * tx;  // gain of a dependency edge over S serial sends
  const double base = w + static_cast<double>(r.units() - 1) * tx;
  // Cross edges a source at distance d (d+1 hops upstream of the receiver) can take.
  auto edges = [&](long d) -> long {
    if (d > jmax) return -1;
    if (kappa <= 0) return d;
    return d + static_cast<long>(n) * ((jmax - d) / n);
  };
  std::vector<long> first(classes.size());
  long pos = 0;
  for (std::size_t i = 0; i < classes.size(); ++i) {
    first[i] = pos;
    pos += classes[i].count;
  }
  std::vector<double> finish(classes.size(), 0.0);
  for (std::size_t dst = 0; dst < classes.size(); ++dst) {
    double best = 0;
    for (std::size_t src = 0; src < classes.size(); ++src) {
      // d = r - s - 1 (mod n) over the two blocks: an interval of len residues from a.
      const long len = std::min<long>(n, classes[dst].count + classes[src].count - 1);
      const long a = (((first[dst] - first[src] - classes[src].count) % n) + n) % n;
      auto inside = [&](long x) { return ((x - a) % n + n) % n < len; };
      const std::array<long, 5> cand = {a, (a + len - 1) % n, jmax % n, 0, n - 1};
      for (long d : cand) {
        if (!inside(d)) continue;
        const long j = edges(d);
        if (j < 0) continue;
        best = std::max(best, classes[src].offset_us + base + static_cast<double>(j) * kappa);
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
