// The live clock: CLOCK_MONOTONIC in nanoseconds. One vDSO call (~20 ns, no syscall), so the
// plugin may read it once per test() without hurting NCCL's proxy loop. Processes on one
// machine share it, which is what lets two real ranks agree on modelled times.
#pragma once

#include <time.h>

#include <cstdint>

namespace crystal::live {

using TimeNs = std::int64_t;

[[nodiscard]] inline TimeNs nowNs() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace crystal::live
