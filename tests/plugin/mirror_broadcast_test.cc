// Data policy mirror, broadcast from a virtual root (plugin/mirror_broadcast.h): the real
// rank ends with its own data, through stream-ordered copies on the fake CUDA driver.
#include "mirror_broadcast.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fake_cuda_driver.h"

namespace crystal::test {
namespace {

using plugin::broadcastRootIsVirtual;
using plugin::MirrorBroadcast;

TEST(MirrorBroadcast, TypeSizesOfNccl228) {
  EXPECT_EQ(plugin::ncclTypeBytes(0), 1u);   // ncclInt8
  EXPECT_EQ(plugin::ncclTypeBytes(7), 4u);   // ncclFloat32
  EXPECT_EQ(plugin::ncclTypeBytes(8), 8u);   // ncclFloat64
  EXPECT_EQ(plugin::ncclTypeBytes(9), 2u);   // ncclBfloat16
  EXPECT_EQ(plugin::ncclTypeBytes(11), 1u);  // ncclFloat8e5m2
  EXPECT_EQ(plugin::ncclTypeBytes(12), 0u);
  EXPECT_EQ(plugin::ncclTypeBytes(-1), 0u);
}

TEST(MirrorBroadcast, WhichRootsAreVirtual) {
  const std::vector<int> one{5}, two{0, 32};
  EXPECT_TRUE(broadcastRootIsVirtual(5, 64, 0, one, 64));    // the only real rank: all others
  EXPECT_TRUE(broadcastRootIsVirtual(2, 8, 0, one, 64));     // also in a split comm
  EXPECT_FALSE(broadcastRootIsVirtual(5, 64, 5, one, 64));   // its own broadcast
  EXPECT_FALSE(broadcastRootIsVirtual(5, 64, 64, one, 64));  // out of range: NCCL says so
  EXPECT_TRUE(broadcastRootIsVirtual(0, 64, 1, two, 64));    // world: 1 is not real
  EXPECT_FALSE(broadcastRootIsVirtual(0, 64, 32, two, 64));  // world: 32 is real
  EXPECT_FALSE(broadcastRootIsVirtual(0, 8, 1, two, 64));    // split, two real: not known
}

TEST(MirrorBroadcast, InPlaceKeepsTheRealRanksBuffer) {
  FakeGpu& gpu = installFakeDriver();
  std::vector<float> buf{1, 2, 3, 4};
  MirrorBroadcast m(buf.data(), buf.data(), buf.size() * sizeof(float), nullptr);
  m.before();
  std::fill(buf.begin(), buf.end(), 0.0f);  // what the virtual root's bytes left there
  m.after();
  EXPECT_EQ(buf, (std::vector<float>{1, 2, 3, 4}));
  ASSERT_EQ(gpu.named("cuMemAllocAsync").size(), 1u);
  EXPECT_EQ(gpu.named("cuMemAllocAsync")[0].bytes, 16u);
  EXPECT_EQ(gpu.named("cuMemcpyDtoDAsync").size(), 2u);
  EXPECT_EQ(gpu.named("cuMemFreeAsync").size(), 1u);
  EXPECT_EQ(gpu.live_device_allocs, 0);
  uninstallFakeDriver();
}

TEST(MirrorBroadcast, OutOfPlaceCopiesTheSendBufferAfter) {
  FakeGpu& gpu = installFakeDriver();
  std::vector<int> send{7, 8, 9}, recv{0, 0, 0};
  MirrorBroadcast m(send.data(), recv.data(), sizeof(int) * 3, nullptr);
  m.before();
  EXPECT_TRUE(gpu.calls.empty());  // nothing to keep: the send buffer is not written
  m.after();
  EXPECT_EQ(recv, send);
  ASSERT_EQ(gpu.named("cuMemcpyDtoDAsync").size(), 1u);
  EXPECT_EQ(gpu.named("cuMemcpyDtoDAsync")[0].dst, reinterpret_cast<std::uintptr_t>(recv.data()));
  EXPECT_EQ(gpu.count("cuMemAlloc"), 0u);
  uninstallFakeDriver();
}

TEST(MirrorBroadcast, EmptyBroadcastCallsNothing) {
  FakeGpu& gpu = installFakeDriver();
  int x = 3;
  MirrorBroadcast m(&x, &x, 0, nullptr);
  m.before();
  m.after();
  EXPECT_TRUE(gpu.calls.empty());
  uninstallFakeDriver();
}

}  // namespace
}  // namespace crystal::test
