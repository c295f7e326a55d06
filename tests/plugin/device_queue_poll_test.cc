// DeviceQueue::doneInPoll: the queue's work runs in stream order, so within one poll a slot
// marked after one found not ready is not ready either, and the driver is not asked again.
#include <gtest/gtest.h>

#include "device_queue.h"
#include "fake_cuda_driver.h"

namespace crystal::test {
namespace {

TEST(DeviceQueuePoll, LaterMarksAreNotAskedForOnceAnEarlierOneIsPending) {
  FakeGpu& gpu = installFakeDriver();
  {
    plugin::DeviceQueue q(4);
    gpu.complete = false;
    q.mark(2);
    q.mark(0);  // marked after slot 2
    q.mark(1);
    q.newPoll();
    EXPECT_FALSE(q.doneInPoll(0));
    EXPECT_EQ(gpu.event_queries, 1u);
    EXPECT_FALSE(q.doneInPoll(1)) << "marked after a pending slot";
    EXPECT_EQ(gpu.event_queries, 1u) << "answered without the driver";
    EXPECT_FALSE(q.doneInPoll(2)) << "marked before: asked";
    EXPECT_EQ(gpu.event_queries, 2u);
    EXPECT_FALSE(q.doneInPoll(0)) << "still this poll";
    EXPECT_EQ(gpu.event_queries, 2u);
    gpu.complete = true;
    EXPECT_FALSE(q.doneInPoll(1)) << "the poll's answer stands until the next poll";
    q.newPoll();
    EXPECT_TRUE(q.doneInPoll(1));
    EXPECT_TRUE(q.doneInPoll(0));
    EXPECT_TRUE(q.doneInPoll(2));
    EXPECT_EQ(gpu.event_queries, 5u);
    EXPECT_TRUE(q.doneInPoll(1)) << "done is remembered";
    EXPECT_EQ(gpu.event_queries, 5u);
  }
  uninstallFakeDriver();
}

}  // namespace
}  // namespace crystal::test
