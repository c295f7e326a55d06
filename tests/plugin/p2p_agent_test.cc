// The P2P pacing agent's CPU side (plugin/p2p_agent.h) against the fake CUDA driver, whose
// "agent kernel" is p2pAgentPass: which connections it paces, that receives of a ring
// all-reduce are released only once the operation ran and within its slices, that the kernel
// leaves when nothing is outstanding (so a program's cudaDeviceSynchronize returns), that a
// stream under graph capture is refused, and that a stalled pacing releases every counter
// instead of hanging the job.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "crystal/live/collective_log.h"
#include "errors.h"
#include "fake_cuda_driver.h"
#include "fidelity.h"
#include "p2p_agent.h"
#include "state.h"

namespace crystal::test {
namespace {

using plugin::P2pAgent;
using plugin::P2pConnection;
namespace pa = plugin::p2p_agent;

const unsigned char kImage[] = {0};  // the fake loads anything

template <typename Pred>
bool eventually(Pred pred, double secs = 5) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
  while (std::chrono::steady_clock::now() < end) {
    (void)p2pAgentPass();
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return false;
}

std::uint64_t load(const std::uint64_t& x) {
  return std::atomic_ref(const_cast<std::uint64_t&>(x)).load();
}

class P2pAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu_ = &installFakeDriver();
    P2pAgent::setImageForTesting(kImage);
    Config cfg;  // one node of 8 H200
    cfg.cluster.nodes = 1;
    plugin::PluginState::get().configure(cfg);
  }
  void TearDown() override {
    P2pAgent::forget(kHash);
    // The agents left their tables allocated on purpose (a kernel might still run); none
    // does here, and a test that made several would otherwise leak all but the newest.
    (void)freeLeftHostAllocs();
    P2pAgent::setImageForTesting(nullptr);
    P2pAgent::setStallNsForTesting(0);
    P2pAgent::setIdleSpinNsForTesting(0);
    uninstallFakeDriver();
  }
  std::shared_ptr<P2pAgent> make() {
    std::string why;
    auto a = P2pAgent::create(kHash, 0, 8, reinterpret_cast<void*>(0x1), {}, 0, &why);
    EXPECT_TRUE(a) << why;
    return a;
  }
  // `a` gone, an agent asked for with `env`=`value` (out of its range): none, and why.
  static std::string refusedWith(std::shared_ptr<P2pAgent>& a, const char* env, const char* value) {
    P2pAgent::forget(kHash);
    a.reset();
    (void)freeLeftHostAllocs();
    ::setenv(env, value, 1);
    std::string why;
    EXPECT_FALSE(P2pAgent::create(kHash, 0, 8, reinterpret_cast<void*>(0x1), {}, 0, &why));
    ::unsetenv(env);
    return why;
  }
  // An agent with preludes on (CRYSTAL_P2P_PRELUDE=1) pacing R's ring connections to its
  // neighbours (send to rank 1, receive from rank 7 of 8).
  std::shared_ptr<P2pAgent> makeArmed() {
    ::setenv("CRYSTAL_P2P_PRELUDE", "1", 1);
    auto a = make();
    ::unsetenv("CRYSTAL_P2P_PRELUDE");
    if (!a) return a;
    const auto addr = [](std::uint64_t& x) { return reinterpret_cast<std::uint64_t>(&x); };
    EXPECT_TRUE(a->add({addr(r_head_), addr(v_tail_), 1, 8, 0, true, 1}));
    EXPECT_TRUE(a->add({addr(r_tail_), addr(v_head_), 7, 8, 0, false, 2}));
    return a;
  }
  // The program calls `e` on the comm (the tuner logged it, the interposer brackets the call).
  static void call(P2pAgent& a, const live::CollectiveEntry& e) {
    live::collectiveLog(kHash)->append(e);
    const P2pAgent::Op op = a.before(nullptr);
    a.after(op);
  }
  static constexpr std::uint64_t kHash = 0x5eed;
  FakeGpu* gpu_ = nullptr;
  // R's own counters (targets) and the pool blocks' counters R's kernel moves (watched).
  std::uint64_t r_head_ = 0, r_tail_ = 0, v_tail_ = 0, v_head_ = 0;
};

TEST_F(P2pAgentTest, PacesRingConnectionsOnlyAndLeavesWhenIdle) {
  auto a = make();
  ASSERT_TRUE(a);
  EXPECT_EQ(P2pAgent::find(kHash), a);
  const auto addr = [](std::uint64_t& x) { return reinterpret_cast<std::uint64_t>(&x); };
  // Not paced: a p2p (send/recv) connection, a connection to another peer than R's ring
  // neighbour. Paced: R's ring neighbours' connectors, whichever graph set them up (a tree's,
  // graph byte 2, connected first, is the one NCCL's ring then uses).
  EXPECT_FALSE(a->add({addr(r_head_), addr(v_tail_), 1, 8, 0, true, 0}));
  EXPECT_FALSE(a->add({addr(r_head_), addr(v_tail_), 2, 8, 0, true, 1}));
  EXPECT_TRUE(a->add({addr(r_head_), addr(v_tail_), 1, 8, 0, true, 1}));   // send to next
  EXPECT_TRUE(a->add({addr(r_tail_), addr(v_head_), 7, 8, 0, false, 2}));  // recv from prev

  // An 8 MiB all-reduce on one channel: 28 slices of 2 steps each way.
  gpu_->complete = false;
  live::collectiveLog(kHash)->append(
      {model::Func::AllReduce, model::Algo::Ring, model::Proto::Simple, 8u << 20, 1});
  const P2pAgent::Op op = a->before(nullptr);
  a->after(op);
  // Warm-up, then this one's (by the pacing thread: LaunchIsThePacingThreadsWhileItSpins).
  ASSERT_TRUE(eventually([&] { return gpu_->count("cuLaunchKernel:crystal_p2p_agent") == 2u; }));
  // The stream reaches the operation (the first event); R's kernel has sent nothing yet: its
  // receive tail stays (a channel without work is left alone).
  std::atomic_ref(gpu_->done_through).store(gpu_->count("cuEventRecord") - 1);
  EXPECT_FALSE(eventually([&] { return load(r_tail_) != 0; }, 0.2));
  // R sends its first slice: the receives follow at the model's pace, at most the slots R has
  // (8 steps while it consumed nothing), and the send's credit comes back.
  std::atomic_ref(v_tail_).store(2);
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 8 && load(r_head_) == 2; }));
  // R consumed everything: the rest of the operation's 28 slices, never more.
  std::atomic_ref(v_head_).store(56);
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 56; }));
  EXPECT_FALSE(eventually([&] { return load(r_tail_) > 56; }, 0.1));
  // The operation ends (second event): nothing outstanding, the kernel is told to leave.
  gpu_->complete = true;
  EXPECT_TRUE(eventually([&] { return !p2pAgentPass(); }));
  EXPECT_NE(a->stateLine().find("1 operations done"), std::string::npos) << a->stateLine();
}

// CRYSTAL_P2P_QUERY_GAP_NS: while an operation runs, the pacing thread asks the driver about
// the stream at most once a gap (each cuEventQuery contends with the program's own driver
// calls), and still sees the operation end.
TEST_F(P2pAgentTest, EventQueriesKeepTheirGap) {
  ::setenv(plugin::kEnvP2pQueryGap, "100000", 1);  // 100 us
  auto a = make();
  ::unsetenv(plugin::kEnvP2pQueryGap);
  ASSERT_TRUE(a);
  gpu_->complete = false;
  live::collectiveLog(kHash)->append(
      {model::Func::AllGather, model::Algo::Ring, model::Proto::Simple, 1u << 20, 1});
  const auto q0 = gpu_->event_queries.load();
  const auto t0 = std::chrono::steady_clock::now();
  a->after(a->before(nullptr));
  ASSERT_TRUE(eventually([&] { return gpu_->event_queries.load() > q0; }));  // it asks
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto queries = gpu_->event_queries.load() - q0;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LE(queries, static_cast<std::uint64_t>(ms / 0.1) + 2) << ms << " ms";
  gpu_->complete = true;
  EXPECT_TRUE(eventually([&] { return !p2pAgentPass(); }));
  EXPECT_NE(a->stateLine().find("1 operations done"), std::string::npos) << a->stateLine();
  // Out of range: no agent, and why.
  const std::string why = refusedWith(a, plugin::kEnvP2pQueryGap, "-1");
  EXPECT_NE(why.find("CRYSTAL_P2P_QUERY_GAP_NS"), std::string::npos) << why;
}

// Preludes (p2p_agent_abi.h): an all-gather queued while R's stream has not reached it is
// armed, and the kernel opens its receives by itself the model's base cost after the
// program's call (nothing received before: its first operation), within R's slots, before
// the CPU saw the stream reach it (here it never does until the end) and before R sent.
TEST_F(P2pAgentTest, AnArmedOperationsFirstReceivesComeFromTheKernel) {
  auto a = makeArmed();
  ASSERT_TRUE(a);
  gpu_->complete = false;
  // 1 MiB on one channel: 14 slices of 2 steps each way, all in the prelude.
  call(*a, {model::Func::AllGather, model::Algo::Ring, model::Proto::Simple, 1u << 20, 1});
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 8; })) << a->stateLine();
  EXPECT_TRUE(eventually([&] {
    return a->stateLine().find("1 armed with a prelude (1 channels anchored one, 0 too late)") !=
           std::string::npos;
  })) << a->stateLine();
  EXPECT_EQ(load(r_head_), 0u) << "no credit without a send";
  // R consumed what came: the rest of the 14, never more.
  std::atomic_ref(v_head_).store(8);
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 16; }));
  std::atomic_ref(v_head_).store(28);
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 28; }));
  EXPECT_FALSE(eventually([&] { return load(r_tail_) > 28; }, 0.1));
  // The stream reaches it and passes it: done, the kernel leaves.
  gpu_->complete = true;
  EXPECT_TRUE(eventually([&] { return !p2pAgentPass(); }));
  EXPECT_NE(a->stateLine().find("1 operations done"), std::string::npos) << a->stateLine();
}

// Back to back: the operation queued after the running one is armed once the running one's
// anchors came in, from where that one ends (its 14 slices); once R took them its receives
// open, before the CPU saw the stream reach it.
TEST_F(P2pAgentTest, TheNextOperationIsArmedWhileOneRuns) {
  auto a = makeArmed();
  ASSERT_TRUE(a);
  gpu_->complete = false;
  const auto queue = [&] {
    call(*a, {model::Func::AllGather, model::Algo::Ring, model::Proto::Simple, 1u << 20, 1});
  };
  queue();
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 8; })) << a->stateLine();
  std::atomic_ref(gpu_->done_through).store(gpu_->count("cuEventRecord") - 1);  // reached it
  queue();
  // R is in the first (its first send): the second is armed from where the first ends.
  std::atomic_ref(v_tail_).store(2);
  ASSERT_TRUE(eventually([&] {
    return a->stateLine().find("2 armed with a prelude (1 channels anchored one") !=
           std::string::npos;
  })) << a->stateLine();
  // The first runs: R takes every slice as it comes, never one past its 14.
  std::atomic_ref(v_tail_).store(28);
  for (std::uint64_t v = 8; v <= 24; v += 8) {
    std::atomic_ref(v_head_).store(v);
    ASSERT_TRUE(eventually([&] { return load(r_tail_) >= std::min<std::uint64_t>(v + 8, 28); }))
        << load(r_tail_);
  }
  EXPECT_FALSE(eventually([&] { return load(r_tail_) > 28; }, 0.1))
      << "past the first: " << load(r_tail_) << "; " << a->stateLine();
  // R took its last: the second's receives open, R's 8 slots of them.
  std::atomic_ref(v_head_).store(28);
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 36; })) << a->stateLine();
  EXPECT_TRUE(eventually([&] {
    return a->stateLine().find("(2 channels anchored one, 0 too late)") != std::string::npos;
  })) << a->stateLine();
  gpu_->complete = true;
  EXPECT_TRUE(eventually([&] { return !p2pAgentPass(); }));
  EXPECT_NE(a->stateLine().find("2 operations done"), std::string::npos) << a->stateLine();
}

// A broadcast's root comes from the program's call (NCCL's tuner does not say it): with it,
// R (rank 0 of 8) is a member of the chain from root 3 and receives at the chain's pace
// (p2p_pacer.h); without it, as any other operation.
TEST_F(P2pAgentTest, ABroadcastsRootComesFromTheCall) {
  auto a = make();
  ASSERT_TRUE(a);
  const auto addr = [](std::uint64_t& x) { return reinterpret_cast<std::uint64_t>(&x); };
  ASSERT_TRUE(a->add({addr(r_head_), addr(v_tail_), 1, 8, 0, true, 1}));   // send to next
  ASSERT_TRUE(a->add({addr(r_tail_), addr(v_head_), 7, 8, 0, false, 2}));  // recv from prev
  gpu_->complete = true;  // the stream reaches each operation and passes it at once
  for (const int root : {3, -1}) {
    live::collectiveLog(kHash)->append(
        {model::Func::Broadcast, model::Algo::Ring, model::Proto::Simple, 8u << 20, 1});
    P2pAgent::Op op = a->before(nullptr);
    op.root = root;
    a->after(op);
  }
  ASSERT_TRUE(eventually([&] {
    return a->stateLine().find("2 operations done") != std::string::npos;
  })) << a->stateLine();
  EXPECT_NE(a->stateLine().find("(1 received as a chain from its head)"), std::string::npos)
      << a->stateLine();
}

// CRYSTAL_P2P_MARKS=2: both events in the program's call (before and after NCCL's kernel),
// none from the pacing thread; an operation ends when the stream passes its own second.
TEST_F(P2pAgentTest, TwoMarksAnOperation) {
  ::setenv(plugin::kEnvP2pMarks, "2", 1);
  auto a = make();
  ::unsetenv(plugin::kEnvP2pMarks);
  ASSERT_TRUE(a);
  const std::size_t r0 = gpu_->count("cuEventRecord");
  gpu_->complete = false;
  live::collectiveLog(kHash)->append(
      {model::Func::AllGather, model::Algo::Ring, model::Proto::Simple, 1u << 20, 1});
  a->after(a->before(reinterpret_cast<void*>(0x10)));
  EXPECT_EQ(gpu_->count("cuEventRecord"), r0 + 2);
  std::atomic_ref(gpu_->done_through).store(r0 + 1);  // started, not passed
  EXPECT_FALSE(eventually([&] { return gpu_->count("cuEventRecord") > r0 + 2; }, 0.1));
  EXPECT_EQ(a->stateLine().find("1 operations done"), std::string::npos) << a->stateLine();
  std::atomic_ref(gpu_->done_through).store(r0 + 2);
  ASSERT_TRUE(eventually([&] {
    return a->stateLine().find("1 operations done") != std::string::npos && !p2pAgentPass();
  })) << a->stateLine();
  EXPECT_EQ(gpu_->count("cuEventRecord"), r0 + 2);
}

// CRYSTAL_P2P_MARKS=1: the program's call records one event (before NCCL's kernel) on an
// ordinary stream, so one event fewer sits between two kernels. Back to back on a stream an operation ends where the
// next one starts; the last one's end is marked by the pacing thread once the program made no
// call for a while (never on a stream under graph capture: the record would join the
// program's graph), and an operation followed on another stream is marked at once.
TEST_F(P2pAgentTest, OneMarkAnOperation) {
  ::setenv(plugin::kEnvP2pMarks, "1", 1);
  auto a = make();
  ::unsetenv(plugin::kEnvP2pMarks);
  ASSERT_TRUE(a);
  const auto records = [&, r0 = gpu_->count("cuEventRecord")] {
    return gpu_->count("cuEventRecord") - r0;
  };
  const auto done = [&](int n) {
    return a->stateLine().find(std::to_string(n) + " operations done") != std::string::npos;
  };
  const live::CollectiveEntry gather{model::Func::AllGather, model::Algo::Ring,
                                     model::Proto::Simple, 1u << 20, 1};
  auto* const s1 = reinterpret_cast<void*>(0x10);
  auto* const s2 = reinterpret_cast<void*>(0x20);
  gpu_->complete = false;
  const std::uint64_t first = gpu_->count("cuEventRecord");  // records count from 1
  live::collectiveLog(kHash)->append(gather);
  const P2pAgent::Op op1 = a->before(s1);
  EXPECT_EQ(records(), 1u);
  a->after(op1);
  EXPECT_EQ(records(), 1u);  // the call records nothing after NCCL's kernel
  live::collectiveLog(kHash)->append(gather);
  a->after(a->before(s1));
  EXPECT_EQ(records(), 2u);
  // The stream passes the first operation and reaches the second: the first is done, with no
  // mark of its own.
  std::atomic_ref(gpu_->done_through).store(first + 2);
  ASSERT_TRUE(eventually([&] { return done(1); })) << a->stateLine();
  // The second is the last: the pacing thread marks its end, done once the stream passes it.
  ASSERT_TRUE(eventually([&] { return records() == 3u; }));
  EXPECT_FALSE(eventually([&] { return done(2); }, 0.1)) << a->stateLine();
  gpu_->complete = true;
  ASSERT_TRUE(eventually([&] { return done(2) && !p2pAgentPass(); })) << a->stateLine();
  EXPECT_EQ(records(), 3u);

  // The program inside its next call (NCCL may hold it there while the kernel runs): that
  // call's start, recorded on the stream, ends the last operation; no mark of its own.
  gpu_->complete = false;
  live::collectiveLog(kHash)->append(gather);
  a->after(a->before(s1));  // record 4
  live::collectiveLog(kHash)->append(gather);
  const P2pAgent::Op held = a->before(s1);  // record 5, the call still open
  std::atomic_ref(gpu_->done_through).store(first + 5);
  ASSERT_TRUE(eventually([&] { return done(3); })) << a->stateLine();
  EXPECT_EQ(records(), 5u);
  a->after(held);
  ASSERT_TRUE(eventually([&] { return records() == 6u; }));  // now the last: marked
  gpu_->complete = true;
  ASSERT_TRUE(eventually([&] { return done(4) && !p2pAgentPass(); })) << a->stateLine();

  // Under capture no mark; once the capture ended, the mark and the end.
  gpu_->complete = false;
  live::collectiveLog(kHash)->append(gather);
  a->after(a->before(s1));
  std::atomic_ref(gpu_->capturing).store(true);
  std::atomic_ref(gpu_->done_through).store(first + 7);  // the stream reached it
  EXPECT_FALSE(eventually([&] { return records() > 7u; }, 0.1));
  std::atomic_ref(gpu_->capturing).store(false);
  ASSERT_TRUE(eventually([&] { return records() == 8u; }));
  gpu_->complete = true;
  ASSERT_TRUE(eventually([&] { return done(5) && !p2pAgentPass(); })) << a->stateLine();

  // The next operation on another stream: the first is marked where its stream stands.
  gpu_->complete = false;
  live::collectiveLog(kHash)->append(gather);
  const P2pAgent::Op op4 = a->before(s1);
  live::collectiveLog(kHash)->append(gather);
  const P2pAgent::Op op5 = a->before(s2);
  a->after(op4);
  a->after(op5);
  std::atomic_ref(gpu_->done_through).store(first + 10);  // both starts passed
  ASSERT_TRUE(eventually([&] { return records() == 11u; }));  // op4's mark
  EXPECT_FALSE(eventually([&] { return done(6); }, 0.05));  // the stream has not passed it
  gpu_->complete = true;
  ASSERT_TRUE(eventually([&] { return done(7) && !p2pAgentPass(); })) << a->stateLine();
  EXPECT_EQ(records(), 12u);  // then op5's, the last
  // A default stream (0, legacy, per-thread) gets its mark in the call, as with two: another
  // thread's record on the per-thread handle would land on that thread's own stream.
  for (const std::uintptr_t handle : {0x0, 0x1, 0x2}) {
    const std::size_t before = records();
    live::collectiveLog(kHash)->append(gather);
    a->after(a->before(reinterpret_cast<void*>(handle)));
    EXPECT_EQ(records(), before + 2) << handle;
    ASSERT_TRUE(eventually([&] { return !p2pAgentPass(); })) << handle;
    EXPECT_EQ(records(), before + 2) << handle;  // and the pacing thread adds none
  }
  ASSERT_TRUE(eventually([&] { return done(10); })) << a->stateLine();
  // Out of range: no agent, and why.
  const std::string why = refusedWith(a, plugin::kEnvP2pMarks, "3");
  EXPECT_NE(why.find("CRYSTAL_P2P_MARKS"), std::string::npos) << why;
}

// The kernel's launch (a few us of cuLaunchKernel) is off the program's thread while the
// pacing thread spins: after() returns without it and the pacing thread launches at its next
// pass. Asleep (nothing for kIdleSpinNs), the pacing thread would first need a wake-up, and
// the operation still gets its kernel.
TEST_F(P2pAgentTest, LaunchIsThePacingThreadsWhileItSpins) {
  const auto addr = [](std::uint64_t& x) { return reinterpret_cast<std::uint64_t>(&x); };
  std::shared_ptr<P2pAgent> a;
  auto makePaced = [&](live::TimeNs idle_spin_ns) {
    P2pAgent::forget(kHash);
    a.reset();
    P2pAgent::setIdleSpinNsForTesting(idle_spin_ns);
    a = make();
    ASSERT_TRUE(a);
    ASSERT_TRUE(a->add({addr(r_head_), addr(v_tail_), 1, 8, 0, true, 1}));
    ASSERT_TRUE(a->add({addr(r_tail_), addr(v_head_), 7, 8, 0, false, 2}));
    ASSERT_TRUE(eventually([&] { return !p2pAgentPass(); }));  // the warm-up kernel left
  };
  // One operation the stream has already run: its kernel is launched (the count grows by
  // one), it is done, and the kernel leaves (nothing outstanding).
  auto runOne = [&](int done) {
    const std::size_t launches = gpu_->count("cuLaunchKernel:crystal_p2p_agent");
    gpu_->complete = true;
    live::collectiveLog(kHash)->append(
        {model::Func::AllReduce, model::Algo::Ring, model::Proto::Simple, 8u << 20, 1});
    a->after(a->before(nullptr));
    ASSERT_TRUE(eventually(
        [&] { return gpu_->count("cuLaunchKernel:crystal_p2p_agent") == launches + 1; }));
    ASSERT_TRUE(eventually([&] {
      return !p2pAgentPass() &&
             a->stateLine().find(std::to_string(done) + " operations done") != std::string::npos;
    }));
  };
  // Spinning for sure while the test thread (maybe descheduled on a loaded box) works: every
  // operation's kernel is launched off this thread, again after the kernel left.
  makePaced(60'000'000'000);
  for (int done = 1; done <= 2; ++done) {
    runOne(done);
    EXPECT_NE(gpu_->agent_launcher, std::this_thread::get_id()) << done;
  }
  // An agent that sleeps as soon as it is idle: after() launches itself (a wake-up would come
  // later), and the operation runs.
  makePaced(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the thread took its connections
  runOne(1);
}

// Over several target nodes every position's ring connections to GPUs of its node are paced:
// the middle ones both ways, a node's first only its send (it receives over the NET), its
// last only its receive (it sends over the NET). Connections to other peers are not.
TEST_F(P2pAgentTest, OverSeveralNodesEveryPositionIsPaced) {
  Config cfg;
  cfg.cluster.nodes = 2;
  plugin::PluginState::get().configure(cfg);
  const auto addr = [](std::uint64_t& x) { return reinterpret_cast<std::uint64_t>(&x); };
  for (const int rank : {0, 7, 8, 15, 5}) {
    std::string why;
    auto a = P2pAgent::create(kHash, rank, 16, reinterpret_cast<void*>(0x1), {}, 0, &why);
    ASSERT_TRUE(a) << why;
    EXPECT_TRUE(a->add({addr(r_head_), addr(v_tail_), (rank + 1) % 16, 16, 0, true, 1})) << rank;
    EXPECT_TRUE(a->add({addr(r_tail_), addr(v_head_), (rank + 15) % 16, 16, 0, false, 1})) << rank;
    EXPECT_FALSE(a->add({addr(r_head_), addr(v_tail_), (rank + 2) % 16, 16, 1, true, 1})) << rank;
    P2pAgent::forget(kHash);
  }
}

// A ring the host rotated (host/node_graph.h: rank 0 between local 7 and 1): the ring's
// connectors are those to the neighbours it reports, the tree's own stay rank -/+ 1 (its chain
// in rank order: rank 0 heads it, so only the receive from its child 1).
TEST_F(P2pAgentTest, RotatedRingTakesTheHostsNeighbours) {
  Config cfg;
  cfg.cluster.nodes = 2;
  plugin::PluginState::get().configure(cfg);
  const auto addr = [](std::uint64_t& x) { return reinterpret_cast<std::uint64_t>(&x); };
  std::string why;
  auto a = P2pAgent::create(kHash, 0, 16, reinterpret_cast<void*>(0x1), {7, 1}, 2, &why);
  ASSERT_TRUE(a) << why;
  EXPECT_TRUE(a->add({addr(r_head_), addr(v_tail_), 1, 16, 0, true, 1}));   // ring send
  EXPECT_TRUE(a->add({addr(r_tail_), addr(v_head_), 7, 16, 0, false, 1}));  // ring receive
  EXPECT_TRUE(a->add({addr(r_tail_), addr(v_head_), 1, 16, 0, false, 2}));  // tree's child
  EXPECT_FALSE(a->add({addr(r_head_), addr(v_tail_), 7, 16, 0, true, 1}));  // not a neighbour
  EXPECT_FALSE(a->add({addr(r_tail_), addr(v_head_), 15, 16, 0, false, 2}));
  P2pAgent::forget(kHash);
  // Where the host said nothing: rank -/+ 1, so 7 is no neighbour of rank 0.
  a = P2pAgent::create(kHash, 0, 16, reinterpret_cast<void*>(0x1), {}, 0, &why);
  ASSERT_TRUE(a) << why;
  EXPECT_FALSE(a->add({addr(r_tail_), addr(v_head_), 7, 16, 0, false, 1}));
  P2pAgent::forget(kHash);
}

TEST_F(P2pAgentTest, StreamUnderGraphCaptureIsRefused) {
  auto a = make();
  ASSERT_TRUE(a);
  gpu_->capturing = true;
  try {
    (void)a->before(nullptr);
    ADD_FAILURE() << "no error for a capturing stream";
  } catch (const plugin::PluginError& e) {
    EXPECT_EQ(e.code(), plugin::Errc::BadArgument);
    EXPECT_NE(std::string(e.what()).find("graph capture"), std::string::npos) << e.what();
  }
}

// A pacing that makes no progress (here: R's kernel never sends, the operation never ends)
// must not hang the job: after the stall bound every counter is released for good (within
// the slots R emptied; the agent kernel keeps that rule).
std::vector<std::string> g_fidelity_notes;
std::mutex g_fidelity_mu;
void keepNote(const std::string& text) noexcept {
  std::lock_guard lock(g_fidelity_mu);
  g_fidelity_notes.push_back(text);
}

TEST_F(P2pAgentTest, StalledPacingReleasesEveryCounter) {
  P2pAgent::setStallNsForTesting(50'000'000);
  testing::internal::CaptureStderr();  // the job's own output says so, whatever NCCL_DEBUG
  plugin::setFidelitySink(&keepNote);  // and the host hears of it (the interposer's sink)
  auto a = make();
  ASSERT_TRUE(a);
  const auto addr = [](std::uint64_t& x) { return reinterpret_cast<std::uint64_t>(&x); };
  ASSERT_TRUE(a->add({addr(r_head_), addr(v_tail_), 1, 8, 0, true, 1}));
  ASSERT_TRUE(a->add({addr(r_tail_), addr(v_head_), 7, 8, 0, false, 1}));
  gpu_->complete = false;
  a->after(a->before(nullptr));
  std::atomic_ref(gpu_->done_through).store(gpu_->count("cuEventRecord") - 1);
  // Free-running: receives as far as R's slots allow, sends credited at once.
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 8; }));
  std::atomic_ref(v_tail_).store(2);
  ASSERT_TRUE(eventually([&] { return load(r_head_) == 2; }));
  std::atomic_ref(v_head_).store(100);
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 108; }));
  gpu_->complete = true;
  EXPECT_TRUE(eventually([&] { return !p2pAgentPass(); }));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("crystal: P2P pacing of comm 0x5eed rank 0 stopped after 0 operations: no "
                     "progress for 0.050 s"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("so this rank's times are not the target's"), std::string::npos) << err;
  // What it waited on: the operation in front (stream, marks) and the pacer's side.
  EXPECT_NE(err.find("the first outstanding: #1 not in the tuner's log, started, its end marked"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("pacer: one step at a time (0 units of 524288 B on 0 channels); 1 paced "
                     "receives, 0 with nothing released beyond what R consumed"),
            std::string::npos)
      << err;
  plugin::setFidelitySink(nullptr);
  std::lock_guard lock(g_fidelity_mu);
  ASSERT_EQ(g_fidelity_notes.size(), 1u);
  EXPECT_EQ(g_fidelity_notes[0].rfind("P2P pacing of comm 0x5eed rank 0 stopped after 0 operations: "
                                      "no progress for 0.050 s",
                                      0),
            0u)
      << g_fidelity_notes[0];
}

// CRYSTAL_P2P_TRACE: every leg of a paced operation, in one file per comm written when the
// agent goes: the operation's start and end, what R's kernel moved, what the CPU released
// and when it was due, and what the kernel stored, with GPU times on the CPU's clock.
TEST_F(P2pAgentTest, TraceRecordsEveryLegOfAnOperation) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("crystal-p2p-trace-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ::setenv("CRYSTAL_P2P_TRACE", (dir / "t").c_str(), 1);
  auto a = make();
  ::unsetenv("CRYSTAL_P2P_TRACE");
  ASSERT_TRUE(a);
  const auto addr = [](std::uint64_t& x) { return reinterpret_cast<std::uint64_t>(&x); };
  ASSERT_TRUE(a->add({addr(r_head_), addr(v_tail_), 1, 8, 0, true, 1}));
  ASSERT_TRUE(a->add({addr(r_tail_), addr(v_head_), 7, 8, 0, false, 1}));
  gpu_->complete = false;
  live::collectiveLog(kHash)->append(
      {model::Func::AllReduce, model::Algo::Ring, model::Proto::Simple, 8u << 20, 1});
  a->after(a->before(nullptr));
  std::atomic_ref(gpu_->done_through).store(gpu_->count("cuEventRecord") - 1);
  std::atomic_ref(v_tail_).store(2);
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 8 && load(r_head_) == 2; }));
  // The trace samples what the kernel stored on each pass of the (spinning) pacing thread:
  // give it time to see the gated 8 before the 56 replaces it.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::atomic_ref(v_head_).store(56);
  ASSERT_TRUE(eventually([&] { return load(r_tail_) == 56; }));
  gpu_->complete = true;
  ASSERT_TRUE(eventually([&] { return !p2pAgentPass(); }));
  a.reset();
  P2pAgent::forget(kHash);  // the last reference: the agent writes its trace

  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].filename().string().find(".5eed.csv"), std::string::npos) << files[0];
  std::ifstream in(files[0]);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "t_ns,kind,conn,dir,ordinal,value,due_ns,gpu_ns,func");
  struct Row {
    long long t, due, gpu;
    char kind, dir;
    int conn;
    unsigned long long value;
    std::string func;
  };
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream ss(line);
    Row r{};
    int ordinal = 0;
    ss >> r.t >> r.kind >> r.conn >> r.dir >> ordinal >> r.value >> r.due >> r.gpu >> r.func;
    ASSERT_FALSE(ss.fail()) << line;
    rows.push_back(r);
  }
  std::map<char, int> kinds;
  for (const Row& r : rows) ++kinds[r.kind];
  EXPECT_EQ(kinds['S'], 1);
  EXPECT_EQ(kinds['D'], 1);
  const Row& start =
      *std::find_if(rows.begin(), rows.end(), [](const Row& r) { return r.kind == 'S'; });
  EXPECT_EQ(start.func, "AllReduce");
  EXPECT_EQ(start.due, 8 << 20);
  // R's moves as the CPU saw them: the send's first slice, the receive slots emptied.
  bool saw_send = false, saw_recv = false;
  for (const Row& r : rows)
    if (r.kind == 'o') {
      saw_send |= r.dir == 's' && r.value == 2;
      saw_recv |= r.dir == 'r' && r.value == 56;
      EXPECT_GE(r.gpu, start.t - 1'000'000) << "GPU time not on the CPU clock";
      // Generous: the mapping of the GPU's clock comes from the (fake) kernel's passes, which
      // a loaded 2-core CI machine under ASan delays by milliseconds (5 ms failed once);
      // what matters is the clock, not 1 s off (the fake GPU clock's offset).
      EXPECT_LE(r.gpu, r.t + 100'000'000) << "seen by the GPU after the CPU saw it";
    }
  EXPECT_TRUE(saw_send && saw_recv);
  // Every receive release was due by then; the kernel stored a receive's tail no further
  // than released (R's slots: 8 steps while R emptied none), after the release, and
  // credited the send's unit R sent.
  long long first_release = -1;
  unsigned long long newest = 0;
  for (const Row& r : rows)
    if (r.kind == 'r') {
      EXPECT_EQ(r.dir, 'r') << "send heads are the agent kernel's";
      EXPECT_LE(r.due, r.t);
      // The schedule starts at R's first send as the kernel stamped it, which may precede
      // the pass that saw the stream reach the operation, by kMaxBackdateNs at most.
      EXPECT_GE(r.due, start.t - P2pAgent::kMaxBackdateNs);
      if (first_release < 0) first_release = r.t;
      newest = std::max(newest, r.value);
    }
  EXPECT_EQ(newest, 56u);
  int stored = 0;
  bool credited = false, gated = false;
  for (const Row& r : rows)
    if (r.kind == 'g') {
      if (r.dir == 'r') {
        EXPECT_LE(r.value, newest);
        EXPECT_GE(r.gpu, first_release);
        gated |= r.value == 8;
      } else {
        credited |= r.value == 2;
      }
      ++stored;
    }
  EXPECT_TRUE(credited);
  EXPECT_TRUE(gated);
  EXPECT_GE(stored, 2);
  std::filesystem::remove_all(dir);
}

TEST_F(P2pAgentTest, OffWithoutAKernelOrWhenAskedSo) {
  P2pAgent::setImageForTesting(nullptr);
  std::string why;
  if (!P2pAgent::builtWithKernel()) {  // CI: no nvcc
    EXPECT_FALSE(P2pAgent::create(kHash, 0, 8, reinterpret_cast<void*>(0x1), {}, 0, &why));
    EXPECT_NE(why.find("without nvcc"), std::string::npos) << why;
  }
  P2pAgent::setImageForTesting(kImage);
  ::setenv("CRYSTAL_P2P_PACE", "0", 1);
  EXPECT_FALSE(P2pAgent::create(kHash, 0, 8, reinterpret_cast<void*>(0x1), {}, 0, &why));
  EXPECT_EQ(why, "CRYSTAL_P2P_PACE=0");
  ::unsetenv("CRYSTAL_P2P_PACE");
  EXPECT_FALSE(P2pAgent::find(kHash));
}

}  // namespace
}  // namespace crystal::test

namespace crystal::plugin {
namespace {

// GPU times onto the CPU clock: the smallest (CPU after the read - GPU) of the last window or
// two, so a mapped time is never early; nothing before a kernel's first pass.
TEST(GpuClock, MapsByTheSmallestOffsetOfRecentWindows) {
  GpuClock c;
  EXPECT_FALSE(c.toCpu(1000));
  c.sample(1'000'000, 0);  // no pass yet
  EXPECT_FALSE(c.toCpu(1000));
  c.sample(1'000'500, 1'000'000);  // read 500 ns after the GPU wrote it
  c.sample(1'002'200, 1'002'000);  // 200
  c.sample(1'003'900, 1'003'000);  // 900
  ASSERT_TRUE(c.toCpu(2'000'000));
  EXPECT_EQ(*c.toCpu(2'000'000), 2'000'200);
  EXPECT_FALSE(c.toCpu(0));
  // Two windows later the old samples are gone: the offset follows the clocks' drift.
  c.sample(1'000'000 + GpuClock::kWindowNs + 1, 1'000'000 + GpuClock::kWindowNs - 99);
  c.sample(1'000'000 + 3 * GpuClock::kWindowNs, 1'000'000 + 3 * GpuClock::kWindowNs - 300);
  EXPECT_EQ(*c.toCpu(5'000'000), 5'000'100);
  c.sample(1'000'000 + 5 * GpuClock::kWindowNs, 1'000'000 + 5 * GpuClock::kWindowNs - 400);
  EXPECT_EQ(*c.toCpu(5'000'000), 5'000'300);
}

}  // namespace
}  // namespace crystal::plugin
