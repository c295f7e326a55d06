// Data policy mirror, results the interposer writes around NCCL's call (plugin/mirror_result.h,
// mirror_group.h, mirror_kernel.h): broadcasts from a virtual root keep the real rank's data,
// reductions become N copies' result, grouped calls wait for the outermost group end. On the
// fake CUDA driver, which performs copies and the mirror kernel on host memory at once.
#include "mirror_result.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "errors.h"
#include "fake_cuda_driver.h"
#include "mirror_group.h"
#include "mirror_kernel.h"
#include "mirror_kernel_abi.h"

namespace crystal::test {
namespace {

using plugin::broadcastRootIsVirtual;
using plugin::MirrorAction;
using plugin::MirrorGroup;
using plugin::MirrorResult;
namespace mk = plugin::mirror_kernel;

constexpr unsigned char kImage[] = {1, 2, 3};  // the fake driver loads any image

class MirrorKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu_ = &installFakeDriver();
    plugin::setMirrorKernelImageForTesting(kImage);
    std::string why;
    kernel_ = plugin::mirrorKernel(&why);
    ASSERT_NE(kernel_, nullptr) << why;
  }
  void TearDown() override {
    plugin::setMirrorKernelImageForTesting(nullptr);
    uninstallFakeDriver();
  }
  FakeGpu* gpu_ = nullptr;
  plugin::cuda::Function kernel_ = nullptr;
};

TEST(MirrorResult, TypeSizesOfNccl228) {
  EXPECT_EQ(plugin::ncclTypeBytes(0), 1u);   // ncclInt8
  EXPECT_EQ(plugin::ncclTypeBytes(7), 4u);   // ncclFloat32
  EXPECT_EQ(plugin::ncclTypeBytes(8), 8u);   // ncclFloat64
  EXPECT_EQ(plugin::ncclTypeBytes(9), 2u);   // ncclBfloat16
  EXPECT_EQ(plugin::ncclTypeBytes(11), 1u);  // ncclFloat8e5m2
  EXPECT_EQ(plugin::ncclTypeBytes(12), 0u);
  EXPECT_EQ(plugin::ncclTypeBytes(-1), 0u);
}

TEST(MirrorResult, ReductionOpsOverCopies) {
  EXPECT_EQ(plugin::reductionAction(0), MirrorAction::Scale);  // ncclSum: n x
  EXPECT_EQ(plugin::reductionAction(1), MirrorAction::Power);  // ncclProd: x^n
  EXPECT_EQ(plugin::reductionAction(2), MirrorAction::Copy);   // ncclMax
  EXPECT_EQ(plugin::reductionAction(3), MirrorAction::Copy);   // ncclMin
  EXPECT_EQ(plugin::reductionAction(4), MirrorAction::Copy);   // ncclAvg: n x / n
  EXPECT_EQ(plugin::reductionAction(5), std::nullopt);         // a PreMulSum op: scalar unknown
}

TEST(MirrorResult, WhichBroadcastRootsAreVirtual) {
  const std::vector<int> one{5}, two{0, 32};
  EXPECT_TRUE(broadcastRootIsVirtual(5, 64, 0, one, 64));    // the only real rank: all others
  EXPECT_TRUE(broadcastRootIsVirtual(2, 8, 0, one, 64));     // also in a split comm
  EXPECT_FALSE(broadcastRootIsVirtual(5, 64, 5, one, 64));   // its own broadcast
  EXPECT_FALSE(broadcastRootIsVirtual(5, 64, 64, one, 64));  // out of range: NCCL says so
  EXPECT_TRUE(broadcastRootIsVirtual(0, 64, 1, two, 64));    // world: 1 is not real
  EXPECT_FALSE(broadcastRootIsVirtual(0, 64, 32, two, 64));  // world: 32 is real
  EXPECT_FALSE(broadcastRootIsVirtual(0, 8, 1, two, 64));    // split, two real: not known
}

TEST(MirrorResult, InPlaceBroadcastKeepsTheRealRanksBuffer) {
  FakeGpu& gpu = installFakeDriver();
  std::vector<float> buf{1, 2, 3, 4};
  MirrorResult m(buf.data(), buf.data(), buf.size(), mk::kFloat32, MirrorAction::Copy, 1, nullptr);
  m.before();
  std::fill(buf.begin(), buf.end(), 0.0f);  // what the virtual root's bytes left there
  m.after(nullptr);
  EXPECT_EQ(buf, (std::vector<float>{1, 2, 3, 4}));
  ASSERT_EQ(gpu.named("cuMemAllocAsync").size(), 1u);
  EXPECT_EQ(gpu.named("cuMemAllocAsync")[0].bytes, 16u);
  EXPECT_EQ(gpu.named("cuMemcpyDtoDAsync").size(), 2u);
  EXPECT_EQ(gpu.named("cuMemFreeAsync").size(), 1u);
  EXPECT_EQ(gpu.live_device_allocs, 0);
  uninstallFakeDriver();
}

TEST(MirrorResult, OutOfPlaceBroadcastCopiesTheSendBufferAfter) {
  FakeGpu& gpu = installFakeDriver();
  std::vector<int> send{7, 8, 9}, recv{0, 0, 0};
  MirrorResult m(send.data(), recv.data(), 3, mk::kInt32, MirrorAction::Copy, 1, nullptr);
  m.before();
  EXPECT_TRUE(gpu.calls.empty());  // nothing to keep: the send buffer is not written
  m.after(nullptr);
  EXPECT_EQ(recv, send);
  ASSERT_EQ(gpu.named("cuMemcpyDtoDAsync").size(), 1u);
  EXPECT_EQ(gpu.named("cuMemcpyDtoDAsync")[0].dst, reinterpret_cast<std::uintptr_t>(recv.data()));
  EXPECT_EQ(gpu.count("cuMemAlloc"), 0u);
  uninstallFakeDriver();
}

TEST(MirrorResult, EmptyCallsNothing) {
  FakeGpu& gpu = installFakeDriver();
  int x = 3;
  MirrorResult m(&x, &x, 0, mk::kInt32, MirrorAction::Scale, 64, nullptr);
  m.before();
  m.after(nullptr);
  EXPECT_TRUE(gpu.calls.empty());
  uninstallFakeDriver();
}

TEST_F(MirrorKernelTest, InPlaceSumIsNTimesTheRealRanksInput) {
  std::vector<float> buf{1.5f, 2.0f, -3.0f};
  MirrorResult m(buf.data(), buf.data(), buf.size(), mk::kFloat32, MirrorAction::Scale, 64,
                 nullptr);
  m.before();
  std::fill(buf.begin(), buf.end(), 7.0f);  // NCCL's result from zeros of a tree's peers
  m.after(kernel_);
  EXPECT_EQ(buf, (std::vector<float>{96.0f, 128.0f, -192.0f}));
  const auto launches = gpu_->named("cuLaunchKernel:crystal_mirror_reduce");
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].dst, reinterpret_cast<std::uintptr_t>(buf.data()));
  EXPECT_NE(launches[0].src, launches[0].dst);  // from the scratch copy taken before
  EXPECT_EQ(launches[0].bytes, 3u);             // elements
  EXPECT_EQ(launches[0].value, 64u);
  EXPECT_EQ(gpu_->live_device_allocs, 0);
}

TEST_F(MirrorKernelTest, OutOfPlaceReductionReadsTheSendBufferAfterTheCall) {
  std::vector<std::int32_t> send{1, -2, 1000}, recv{0, 0, 0};
  MirrorResult m(send.data(), recv.data(), 3, mk::kInt32, MirrorAction::Scale, 8192, nullptr);
  m.before();
  EXPECT_TRUE(gpu_->named("cuMemAllocAsync").empty());
  m.after(kernel_);
  EXPECT_EQ(recv, (std::vector<std::int32_t>{8192, -16384, 8192000}));
  EXPECT_EQ(gpu_->named("cuLaunchKernel:crystal_mirror_reduce")[0].src,
            reinterpret_cast<std::uintptr_t>(send.data()));
}

TEST_F(MirrorKernelTest, ReduceScatterSourceIsTheRanksOwnBlockOfTheSendBuffer) {
  // In place (NCCL: recvbuff == sendbuff + rank * recvcount): rank 2 of 4, 2 per block.
  std::vector<double> buf{1, 2, 3, 4, 5, 6, 7, 8};
  double* own = buf.data() + 2 * 2;
  MirrorResult m(own, own, 2, mk::kFloat64, MirrorAction::Scale, 4, nullptr);
  m.before();
  own[0] = own[1] = 0;
  m.after(kernel_);
  EXPECT_EQ(buf, (std::vector<double>{1, 2, 3, 4, 20, 24, 7, 8}));
}

TEST_F(MirrorKernelTest, IntegerSumsAndProductsWrapLikeNcclsAdditions) {
  std::vector<std::int8_t> x{100, 3, -1}, sum(3), prod(3);
  MirrorResult s(x.data(), sum.data(), 3, mk::kInt8, MirrorAction::Scale, 3, nullptr);
  MirrorResult p(x.data(), prod.data(), 3, mk::kInt8, MirrorAction::Power, 5, nullptr);
  s.after(kernel_);
  p.after(kernel_);
  // 300 mod 256 = 44; 100^5 = 2^10 * 5^10 = 0 mod 256; 3^5 = 243 = -13 as int8; (-1)^5 = -1.
  EXPECT_EQ(sum, (std::vector<std::int8_t>{44, 9, -3}));
  EXPECT_EQ(prod, (std::vector<std::int8_t>{0, -13, -1}));
}

TEST_F(MirrorKernelTest, AverageMaxAndMinOfCopiesAreTheInput) {
  std::vector<float> buf{0.25f, -4.0f};
  MirrorResult m(buf.data(), buf.data(), 2, mk::kFloat32, MirrorAction::Copy, 64, nullptr);
  m.before();
  buf[0] = buf[1] = 0.0f;
  m.after(kernel_);
  EXPECT_EQ(buf, (std::vector<float>{0.25f, -4.0f}));
  EXPECT_TRUE(gpu_->named("cuLaunchKernel:crystal_mirror_reduce").empty());
}

TEST(MirrorResult, ASumWithoutAKernelIsAnErrorNotASilentPass) {
  installFakeDriver();
  float x = 1.0f, y = 0.0f;
  MirrorResult m(&x, &y, 1, mk::kFloat32, MirrorAction::Scale, 2, nullptr);
  EXPECT_THROW(m.after(nullptr), plugin::PluginError);
  uninstallFakeDriver();
}

TEST(MirrorKernel, LoadsOncePerContextAndRemembersAFailure) {
  FakeGpu& gpu = installFakeDriver();
  plugin::setMirrorKernelImageForTesting(kImage);
  std::string why;
  const auto f = plugin::mirrorKernel(&why);
  ASSERT_NE(f, nullptr) << why;
  EXPECT_EQ(plugin::mirrorKernel(&why), f);
  EXPECT_EQ(gpu.count("cuModuleGetFunction:crystal_mirror_reduce"), 1u);

  plugin::setMirrorKernelImageForTesting(kImage);  // forgets the context
  gpu.module_loads = false;
  EXPECT_EQ(plugin::mirrorKernel(&why), nullptr);
  EXPECT_NE(why.find("does not load"), std::string::npos) << why;
  gpu.module_loads = true;
  EXPECT_EQ(plugin::mirrorKernel(&why), nullptr);  // not tried again in this context

  gpu.has_context = false;
  plugin::setMirrorKernelImageForTesting(kImage);
  EXPECT_EQ(plugin::mirrorKernel(&why), nullptr);
  EXPECT_NE(why.find("no CUDA context"), std::string::npos) << why;
  plugin::setMirrorKernelImageForTesting(nullptr);
  uninstallFakeDriver();
}

TEST_F(MirrorKernelTest, GroupedRewritesWaitForTheOutermostGroupEnd) {
  std::vector<float> a{1, 2}, b{3, 4};
  MirrorGroup g;
  g.started();  // ncclGroupStart
  g.started();  // nested
  MirrorResult ma(a.data(), a.data(), 2, mk::kFloat32, MirrorAction::Scale, 4, nullptr);
  MirrorResult mb(b.data(), b.data(), 2, mk::kFloat32, MirrorAction::Scale, 4, nullptr);
  ma.before();
  mb.before();
  ASSERT_TRUE(g.open());
  g.defer(std::move(ma));
  g.defer(std::move(mb));
  std::vector<const void*> ran;
  auto run = [&](MirrorResult& m) {
    m.after(kernel_);
    ran.push_back(&m);
    return 0;
  };
  EXPECT_EQ(g.ended(true, run), 0);  // inner end: NCCL has launched nothing yet
  EXPECT_TRUE(ran.empty());
  EXPECT_EQ(a, (std::vector<float>{1, 2}));
  a = {0, 0};  // the group's all-reduces run at the outer end
  b = {0, 0};
  EXPECT_EQ(g.ended(true, run), 0);
  EXPECT_EQ(ran.size(), 2u);
  EXPECT_EQ(a, (std::vector<float>{4, 8}));
  EXPECT_EQ(b, (std::vector<float>{12, 16}));
  EXPECT_FALSE(g.open());
  EXPECT_EQ(g.waiting(), 0u);
  EXPECT_EQ(gpu_->live_device_allocs, 0);
}

TEST_F(MirrorKernelTest, AGroupThatDidNotLaunchCancelsItsRewrites) {
  std::vector<float> a{1, 2};
  MirrorGroup g;
  g.started();
  MirrorResult m(a.data(), a.data(), 2, mk::kFloat32, MirrorAction::Scale, 4, nullptr);
  m.before();
  g.defer(std::move(m));
  a = {5, 5};
  int runs = 0;
  EXPECT_EQ(g.ended(false, [&](MirrorResult&) { return ++runs; }), 0);
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(a, (std::vector<float>{5, 5}));  // left as NCCL had it
  EXPECT_EQ(gpu_->live_device_allocs, 0);    // the scratch copy freed
}

TEST_F(MirrorKernelTest, AFailedRewriteIsReportedAfterTheOthersRan) {
  std::vector<float> a{1}, b{2};
  MirrorGroup g;
  g.started();
  g.defer(MirrorResult(a.data(), a.data(), 1, mk::kFloat32, MirrorAction::Scale, 2, nullptr));
  g.defer(MirrorResult(b.data(), b.data(), 1, mk::kFloat32, MirrorAction::Scale, 2, nullptr));
  int calls = 0;
  EXPECT_EQ(g.ended(true, [&](MirrorResult&) { return ++calls == 1 ? 2 : 0; }), 2);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace crystal::test
