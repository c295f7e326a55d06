// A broadcast's or reduce's member kernel with peers that never make it wait: the floor no
// member of a chain runs an operation under, and a member's operation with it (docs/model.md
// "Broadcast and reduce back to back"). Shared by the model (NcclModel::chainKernel) and the live
// timing of virtual chains (live::ChainOpCost), so both price it by one formula.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>

namespace crystal::model {

// The kernel's time for an operation against its bytes a channel, as measured: a curve through
// measured points, linear between them and on the last segment's slope past the last (a
// kernel's time is not one fixed cost plus one copy rate: the H100 and H200 copy a chain's
// first chunks at ~25 GB/s a channel and 8 chunks of 512 KiB at ~33). No points: no floor (a
// protocol it was not measured for, or turned off).
struct ChainKernel {
  struct Point {
    double bytes = 0;  // a channel's bytes of one operation
    double us = 0;     // the kernel's time for that operation
  };
  static constexpr std::size_t kMaxPoints = 8;
  std::array<Point, kMaxPoints> points{};
  std::size_t count = 0;

  ChainKernel() = default;
  // Points in increasing bytes (the first at 0: the kernel's fixed work); past kMaxPoints
  // they are dropped.
  ChainKernel(std::initializer_list<Point> pts) {
    for (const Point& p : pts) {
      if (count == kMaxPoints) break;
      points[count++] = p;
    }
  }
  [[nodiscard]] bool empty() const { return count == 0; }
  // Every time times `s` (s <= 0: no floor).
  [[nodiscard]] ChainKernel scaled(double s) const {
    ChainKernel k;
    if (!(s > 0)) return k;
    k = *this;
    for (std::size_t i = 0; i < k.count; ++i) k.points[i].us *= s;
    return k;
  }
  // The kernel's time, us, for `bytes` a channel (0 without a floor).
  [[nodiscard]] double atBytes(double bytes) const {
    if (count == 0) return 0.0;
    if (count == 1 || bytes <= points[0].bytes) return points[0].us;
    std::size_t i = 1;
    while (i + 1 < count && bytes > points[i].bytes) ++i;
    const Point& a = points[i - 1];
    const Point& b = points[i];
    const double span = b.bytes - a.bytes;
    return span > 0 ? a.us + (bytes - a.bytes) * (b.us - a.us) / span : b.us;
  }
  // A member's whole operation, us: the operation's fixed cost `base_us` and its units over
  // its slower link (`crossing_us` a unit), or this kernel, whichever is longer.
  [[nodiscard]] double memberOpUs(double base_us, double units, double unit_bytes,
                                  double crossing_us) const {
    const double links = base_us + units * crossing_us;
    const double kernel = atBytes(units * unit_bytes);
    return links > kernel ? links : kernel;
  }
};

}  // namespace crystal::model
