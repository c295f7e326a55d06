// DeviceQueue::doneInPoll: the queue's work runs in stream order, so within one poll a slot
// marked after one found not ready is not ready either, and the driver is not asked again.
// With the driver's stream memory writes, marks are numbers the stream writes into a host word
// and done() reads it: no driver call at all.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "crystal/base/log.h"
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

TEST(DeviceQueueWords, MarksAreNumbersTheStreamWritesAndDoneReadsThemWithoutTheDriver) {
  FakeGpu& gpu = installFakeDriver(/*stream_mem_ops=*/true);
  {
    plugin::DeviceQueue q(4);
    gpu.complete = false;  // writes held until released
    q.mark(2);
    q.mark(0);
    EXPECT_EQ(gpu.count("cuStreamWriteValue32"), 2u);
    EXPECT_EQ(gpu.count("cuEventRecord"), 0u);
    const auto writes = gpu.named("cuStreamWriteValue32");
    EXPECT_EQ(writes[0].value, 1u);
    EXPECT_EQ(writes[1].value, 2u);
    EXPECT_EQ(writes[0].dst, writes[1].dst) << "one word a queue";
    EXPECT_FALSE(q.done(2));
    EXPECT_FALSE(q.doneInPoll(0));
    EXPECT_TRUE(q.done(1)) << "never marked";
    EXPECT_EQ(releaseFakeStreamWrites(), 2u);
    EXPECT_TRUE(q.done(0)) << "the word passed its number";
    EXPECT_TRUE(q.done(2)) << "an earlier number is done too";
    gpu.complete = true;
    q.mark(3);
    EXPECT_TRUE(q.doneInPoll(3));
    EXPECT_EQ(gpu.event_queries, 0u);
  }
  EXPECT_EQ(gpu.live_host_allocs, 0) << "the word is freed at close";
  uninstallFakeDriver();
}

// A driver that refuses the write (or CRYSTAL_COPY_FLAGS=0) leaves the queue on events, said
// once; the mark that found out is an event too, so nothing is lost.
std::string g_lines;  // what the plugin logged in this file's tests
void keepLine(log::Level, std::string_view, int, std::string_view msg) {
  g_lines.append(msg).push_back('\n');
}

TEST(DeviceQueueWords, RefusedWriteOrParameterOffFallsBackToEvents) {
  log::setSink(&keepLine);
  const log::Level was = log::level();
  log::setLevel(log::Level::Info);
  for (const bool param_off : {false, true}) {
    SCOPED_TRACE(param_off ? "CRYSTAL_COPY_FLAGS=0" : "driver refuses");
    FakeGpu& gpu = installFakeDriver(/*stream_mem_ops=*/true);
    g_lines.clear();
    if (param_off)
      ::setenv("CRYSTAL_COPY_FLAGS", "0", 1);
    else
      gpu.write_value_ok = false;
    {
      plugin::DeviceQueue q(2);
      gpu.complete = false;
      q.mark(0);
      q.mark(1);
      EXPECT_EQ(gpu.count("cuEventRecord"), 2u);
      EXPECT_FALSE(q.done(0));
      gpu.complete = true;
      EXPECT_TRUE(q.done(0));
      EXPECT_TRUE(q.done(1));
      EXPECT_EQ(gpu.count("cuStreamWriteValue32"), param_off ? 0u : 1u) << "tried once";
    }
    EXPECT_EQ(g_lines.find("report completion by events (cuStreamWriteValue32 failed") !=
                  std::string::npos,
              !param_off)
        << g_lines;
    ::unsetenv("CRYSTAL_COPY_FLAGS");
    uninstallFakeDriver();
  }
  log::setLevel(was);
  log::setSink(nullptr);
}

}  // namespace
}  // namespace crystal::test
