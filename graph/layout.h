// A parallel layout as arithmetic on the global rank.
//
// Five dimensions: tp, cp, ep, edp, pp, where edp = dp/ep is the part of data parallelism
// outside the expert groups (Megatron-Core carves EP out of DP). The order string lists
// them fastest-varying first, with "dp" standing for edp: the global rank is a mixed-radix
// number over the dimensions in that order. The full DP index of a rank is ep + ep*edp.
#pragma once

#include <array>
#include <string_view>

#include "crystal/config/config.h"

namespace crystal::graph {

enum Dim : int { kTp = 0, kCp = 1, kEp = 2, kEdp = 3, kPp = 4, kNumDims = 5 };
using DimMask = unsigned;  // bit d set = dimension d
inline constexpr DimMask bit(Dim d) { return 1u << d; }
inline constexpr DimMask kAllDims = (1u << kNumDims) - 1;

[[nodiscard]] std::string_view dimName(Dim d);

class Layout {
 public:
  // Throws InputError (message names job.layout.*) when sizes do not multiply to `world`,
  // ep does not divide dp, or the order is not a permutation of tp,cp,ep,dp,pp (dimensions of
  // size 1 may be left out).
  Layout(const LayoutConfig& config, int world);

  [[nodiscard]] int world() const { return world_; }
  [[nodiscard]] int size(Dim d) const { return size_[d]; }
  [[nodiscard]] int stride(Dim d) const { return stride_[d]; }
  [[nodiscard]] int coord(int rank, Dim d) const { return rank / stride_[d] % size_[d]; }
  [[nodiscard]] int dpIndex(int rank) const {
    return coord(rank, kEp) + size_[kEp] * coord(rank, kEdp);
  }
  // Dimensions fastest-varying first.
  [[nodiscard]] const std::array<Dim, kNumDims>& order() const { return order_; }
  // Product of the sizes of the dimensions in `mask`.
  [[nodiscard]] int extent(DimMask mask) const;
  // Mixed-radix index of `rank`'s coordinates in the dimensions of `mask`, taken in the
  // dimension order tp,cp,ep,edp,pp (the order families number their members in).
  [[nodiscard]] int subIndex(int rank, DimMask mask) const;
  // Inverse: the rank offset contributed by sub-index `index` over `mask`.
  [[nodiscard]] int offsetOf(int index, DimMask mask) const;

 private:
  int world_;
  std::array<int, kNumDims> size_{};
  std::array<int, kNumDims> stride_{};
  std::array<Dim, kNumDims> order_{};
};

}  // namespace crystal::graph
