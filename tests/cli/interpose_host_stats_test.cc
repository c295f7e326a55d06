// CRYSTAL_HOST_STATS through the LD_PRELOAD interposer in front of the fake libnccl.so.2,
// whose calls take a known time: the destroying thread's line counts ungrouped calls and
// outermost group ends as operations, and puts NCCL's time where it was spent. Its own
// binary: the switch is read once per process, and is on here from the start.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fake_nccl.h"

extern "C" {
struct TestId {
  char internal[128];
};
int ncclCommInitRank(void**, int, TestId, int);
int ncclCommDestroy(void*);
int ncclAllReduce(const void*, void*, std::size_t, int, int, void*, void*);
int ncclGroupStart();
int ncclGroupEnd();
}

namespace {

const int kOn = ::setenv("CRYSTAL_HOST_STATS", "1", 1);

void spin(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

// NCCL's time: an all-reduce 20 us, a group end 50 us (an operation stays well under the
// 1 ms above which it counts as connection set-up, app_call_stats.h).
void slowNccl(const char* event) {
  const std::string_view e(event);
  if (e.starts_with("nccl:ncclAllReduce")) spin(std::chrono::microseconds(20));
  if (e == "nccl:ncclGroupEnd") spin(std::chrono::microseconds(50));
}

TEST(InterposerHostStats, NcclsTimeAndOursPerOperation) {
  ASSERT_EQ(kOn, 0);
  ::unsetenv("CRYSTAL_HOST");
  void* comm = nullptr;
  TestId id{};
  ASSERT_EQ(ncclCommInitRank(&comm, 4, id, 1), 0);
  fakeNcclSetHook(slowNccl);
  float x = 1.0f;
  for (int i = 0; i < 2; ++i) ASSERT_EQ(ncclAllReduce(&x, &x, 1, 7, 0, comm, nullptr), 0);
  ASSERT_EQ(ncclGroupStart(), 0);
  ASSERT_EQ(ncclGroupStart(), 0);  // nested: only the outermost end is an operation
  for (int i = 0; i < 3; ++i) ASSERT_EQ(ncclAllReduce(&x, &x, 1, 7, 0, comm, nullptr), 0);
  ASSERT_EQ(ncclGroupEnd(), 0);
  ASSERT_EQ(ncclGroupEnd(), 0);
  fakeNcclSetHook(nullptr);
  testing::internal::CaptureStderr();
  ASSERT_EQ(ncclCommDestroy(comm), 0);
  const std::string out = testing::internal::GetCapturedStderr();
  const auto at = out.find("crystal: host time on thread ");
  ASSERT_NE(at, std::string::npos) << out;
  const auto colon = out.find(": ", at + 29);
  ASSERT_NE(colon, std::string::npos) << out;
  double each = 0, nccl = 0, own = 0;
  int ops = 0, calls = 0, grouped = 0, ends = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + colon + 2,
                        "%d operations (%d calls, %d of them grouped; %d group ends): %lf us each "
                        "on the host, of which NCCL %lf us (its own %lf",
                        &ops, &calls, &grouped, &ends, &each, &nccl, &own),
            7)
      << out;
  // A thread preempted for over 1 ms inside an operation (a loaded machine running ctest -j)
  // makes it look like connection set-up: it is left out whole, and the line says so.
  int left = 0;
  if (const auto l = out.find(" operations over 1 ms left out", colon); l != std::string::npos) {
    const auto semi = out.rfind("; ", l);
    ASSERT_NE(semi, std::string::npos) << out;
    left = std::atoi(out.c_str() + semi + 2);
  }
  EXPECT_EQ(ops + left, 3) << out;
  // u of the two ungrouped all-reduces and g of the one group (3 all-reduces, 2 ends) left out.
  bool accounted = false;
  double nccl_floor = 0;
  for (int u = 0; u <= 2; ++u)
    for (int g = 0; g <= 1; ++g)
      if (u + g == left && calls == (2 - u) + 3 * (1 - g) && grouped == 3 * (1 - g) &&
          ends == 1 - g) {
        accounted = true;
        // Two group ends spin: the inner too.
        if (ops > 0) nccl_floor = ((2 - u) * 20.0 + (1 - g) * (3 * 20.0 + 2 * 50.0)) / ops;
      }
  EXPECT_TRUE(accounted) << out;
  if (left == 0) {
    EXPECT_EQ(calls, 5);
    EXPECT_EQ(grouped, 3);
    EXPECT_EQ(ends, 1);
  }
  if (ops == 0) return;
  EXPECT_GE(nccl, nccl_floor) << out;
  EXPECT_EQ(own, nccl) << "no tuner or profiler in the fake: " << out;
  EXPECT_GE(each, nccl) << out;
  EXPECT_LE(each - nccl, each / 2) << "the interposer's own share: " << out;
}

}  // namespace
