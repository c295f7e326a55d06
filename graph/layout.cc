#include "graph/layout.h"

#include <fmt/core.h>

#include "crystal/base/error.h"

namespace crystal::graph {

std::string_view dimName(Dim d) {
  static constexpr std::array<std::string_view, kNumDims> names{"tp", "cp", "ep", "dp", "pp"};
  return names[d];
}

Layout::Layout(const LayoutConfig& c, int world) : world_(world) {
  const std::array<int, kNumDims> given{c.tp, c.cp, c.ep, c.dp, c.pp};
  for (int d = 0; d < kNumDims; ++d)
    if (given[d] < 1)
      throw InputError(fmt::format("'job.layout.{}' must be >= 1, got {}", dimName(Dim(d)),
                                   given[d]));
  if (c.dp % c.ep != 0)
    throw InputError(fmt::format("'job.layout.ep' = {} does not divide 'job.layout.dp' = {}",
                                 c.ep, c.dp));
  size_ = {c.tp, c.cp, c.ep, c.dp / c.ep, c.pp};
  const long long product = 1LL * c.tp * c.cp * c.dp * c.pp;
  if (product != world)
    throw InputError(fmt::format(
        "'job.layout': tp*cp*dp*pp = {}*{}*{}*{} = {} differs from 'job.world_size' = {}", c.tp,
        c.cp, c.dp, c.pp, product, world));

  // Parse the order: tokens separated by '-', each dimension at most once.
  std::array<bool, kNumDims> seen{};
  int n = 0;
  std::string_view rest = c.order;
  while (!rest.empty()) {
    const auto dash = rest.find('-');
    const std::string_view tok = rest.substr(0, dash);
    rest = dash == std::string_view::npos ? std::string_view{} : rest.substr(dash + 1);
    int d = 0;
    while (d < kNumDims && dimName(Dim(d)) != tok) ++d;
    if (d == kNumDims || seen[d])
      throw InputError(fmt::format(
          "'job.layout.order' = '{}': {} token '{}' (expected a '-'-separated permutation of "
          "tp, cp, ep, dp, pp)",
          c.order, d == kNumDims ? "unknown" : "repeated", tok));
    seen[d] = true;
    order_[n++] = Dim(d);
  }
  // Left-out dimensions must be trivial; they go last (any place is equivalent for size 1).
  for (int d = 0; d < kNumDims; ++d) {
    if (seen[d]) continue;
    if (size_[d] != 1)
      throw InputError(fmt::format("'job.layout.order' = '{}' leaves out '{}' of size {}",
                                   c.order, dimName(Dim(d)), size_[d]));
    order_[n++] = Dim(d);
  }
  int s = 1;
  for (Dim d : order_) {
    stride_[d] = s;
    s *= size_[d];
  }
}

int Layout::extent(DimMask mask) const {
  int e = 1;
  for (int d = 0; d < kNumDims; ++d)
    if (mask & bit(Dim(d))) e *= size_[d];
  return e;
}

int Layout::subIndex(int rank, DimMask mask) const {
  int idx = 0, radix = 1;
  for (int d = 0; d < kNumDims; ++d) {
    if (!(mask & bit(Dim(d)))) continue;
    idx += coord(rank, Dim(d)) * radix;
    radix *= size_[d];
  }
  return idx;
}

int Layout::offsetOf(int index, DimMask mask) const {
  int off = 0;
  for (int d = 0; d < kNumDims; ++d) {
    if (!(mask & bit(Dim(d)))) continue;
    off += (index % size_[d]) * stride_[d];
    index /= size_[d];
  }
  return off;
}

}  // namespace crystal::graph
