// The LD_PRELOAD interposer (plugin/interpose/) in front of a fake libnccl.so.2: a pure
// pass-through without CRYSTAL_HOST; with it, ids come from the host and every
// communicator is registered with the host before the real NCCL call.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "crystal/control/codec.h"
#include "crystal/control/comm_hash.h"
#include "crystal/control/server.h"
#include "crystal/control/socket_io.h"
#include "fake_nccl.h"
#include "recording_handler.h"

// The interposed entry points, as a program sees them (types per nccl.h's ABI).
extern "C" {
struct TestId {
  char internal[128];
};
int ncclGetUniqueId(TestId*);
int ncclCommInitRank(void**, int, TestId, int);
int ncclCommInitRankConfig(void**, int, TestId, int, void*);
int ncclCommInitRankScalable(void**, int, int, int, TestId*, void*);
int ncclCommInitAll(void**, int, const int*);
int ncclCommSplit(void*, int, int, void**, void*);
int ncclCommDestroy(void*);
int ncclAllReduce(const void*, void*, std::size_t, int, int, void*, void*);
int ncclGroupStart();
int ncclGroupEnd();
int ncclGroupSimulateEnd(void*);
int ncclRedOpCreatePreMulSum(int*, void*, int, int, void*);
}

namespace crystal::control {
namespace {

std::vector<std::string> g_events;
void hook(const char* e) { g_events.emplace_back(e); }

class Interposer : public ::testing::Test {
 protected:
  void SetUp() override {
    g_events.clear();
    fakeNcclSetHook(hook);
    fakeNcclSetVersion(kSupportedNcclVersion);
    ::unsetenv("CRYSTAL_HOST");
    ::unsetenv("CRYSTAL_TIMEOUT");
    ::unsetenv("CRYSTAL_HOSTID_PREFIX");
  }
  void TearDown() override { fakeNcclSetHook(nullptr); }
};

TEST_F(Interposer, WithoutHostEverythingPassesThrough) {
  TestId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), 0);
  EXPECT_EQ(static_cast<unsigned char>(id.internal[0]), 0xAB);  // the fake's id
  void* comm = nullptr;
  ASSERT_EQ(ncclCommInitRank(&comm, 4, id, 2), 0);
  ASSERT_NE(comm, nullptr);
  void* child = nullptr;
  ASSERT_EQ(ncclCommSplit(comm, 1, 7, &child, nullptr), 0);
  void* comms[2] = {};
  const int devs[2] = {0, 1};
  ASSERT_EQ(ncclCommInitAll(comms, 2, devs), 0);
  EXPECT_EQ(ncclCommDestroy(child), 0);
  EXPECT_EQ(g_events, (std::vector<std::string>{
                          "nccl:ncclGetUniqueId", "nccl:ncclCommInitRank n=4 r=2 id0=171",
                          "nccl:ncclCommSplit color=1 key=7", "nccl:ncclCommInitAll n=2",
                          "nccl:ncclCommDestroy"}));
}

TEST_F(Interposer, MirrorCallsPassThroughOnCommsTheHostDoesNotKnow) {
  void* comm = nullptr;
  TestId id{};
  ASSERT_EQ(ncclCommInitRank(&comm, 4, id, 1), 0);
  float x = 1.0f;
  g_events.clear();
  ASSERT_EQ(ncclGroupStart(), 0);
  ASSERT_EQ(ncclAllReduce(&x, &x, 1, 7, 0, comm, nullptr), 0);
  ASSERT_EQ(ncclGroupEnd(), 0);
  ASSERT_EQ(ncclGroupStart(), 0);
  ASSERT_EQ(ncclGroupSimulateEnd(nullptr), 0);
  int op = -1;
  float scalar = 0.5f;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, 7, 0, comm), 0);
  EXPECT_EQ(op, 5);
  EXPECT_EQ(x, 1.0f);  // no mirror rewrite: not an emulated communicator
  EXPECT_EQ(g_events, (std::vector<std::string>{
                          "nccl:ncclGroupStart", "nccl:ncclAllReduce count=1 op=0",
                          "nccl:ncclGroupEnd", "nccl:ncclGroupStart",
                          "nccl:ncclGroupSimulateEnd", "nccl:ncclRedOpCreatePreMulSum"}));
  EXPECT_EQ(ncclCommDestroy(comm), 0);
}

TEST_F(Interposer, WithHostIdsComeFromTheHostAndCommsAreRegisteredFirst) {
  testing::RecordingHandler h;
  h.event_log = &g_events;
  ControlServer server(h, {});
  ::setenv("CRYSTAL_HOST", server.address().c_str(), 1);

  TestId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), 0);
  EXPECT_EQ(id.internal[0], 0);  // the host's pattern: byte i = i
  EXPECT_EQ(id.internal[100], 100);
  void* comm = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 64, id, 0, nullptr), 0);
  void* child = nullptr;
  ASSERT_EQ(ncclCommSplit(comm, 3, 0, &child, nullptr), 0);
  void* none = nullptr;
  ASSERT_EQ(ncclCommSplit(comm, -1, 0, &none, nullptr), 0);  // NOCOLOR counts as a split
  void* grandchild = nullptr;
  ASSERT_EQ(ncclCommSplit(child, 0, 0, &grandchild, nullptr), 0);

  // NCCL's own ncclGetUniqueId never ran: no root thread in the real rank.
  EXPECT_EQ(g_events, (std::vector<std::string>{
                          "host:COMM_INIT", "nccl:ncclCommInitRankConfig n=64 r=0 id0=0",
                          "host:COMM_SPLIT", "nccl:ncclCommSplit color=3 key=0", "host:COMM_SPLIT",
                          "nccl:ncclCommSplit color=-1 key=0", "host:COMM_SPLIT",
                          "nccl:ncclCommSplit color=0 key=0"}));
  std::lock_guard lock(h.mu);
  ASSERT_EQ(h.inits.size(), 1u);
  const std::uint64_t world = commHashOfId(h.inits[0].id);
  EXPECT_EQ(h.inits[0].comm_hash, world);
  EXPECT_EQ(h.inits[0].nranks, 64);
  EXPECT_EQ(h.inits[0].rank, 0);
  ASSERT_EQ(h.splits.size(), 3u);
  EXPECT_EQ(h.splits[0].parent_hash, world);
  EXPECT_EQ(h.splits[0].split_seq, 1u);
  EXPECT_EQ(h.splits[0].parent_rank, 0);
  EXPECT_EQ(h.splits[0].parent_nranks, 64);
  EXPECT_EQ(h.splits[0].child_hash, commHashOfSplit(world, 1, 3));
  EXPECT_EQ(h.splits[1].split_seq, 2u);
  EXPECT_EQ(h.splits[1].child_hash, 0u);
  // The child's own record: hash from NCCL's rule, rank/size asked from NCCL after the split.
  EXPECT_EQ(h.splits[2].parent_hash, commHashOfSplit(world, 1, 3));
  EXPECT_EQ(h.splits[2].split_seq, 1u);
  EXPECT_EQ(h.splits[2].parent_rank, 0);
  EXPECT_EQ(h.splits[2].parent_nranks, 8);
}

// CRYSTAL_P2P_POOL: the pool is allocated after the real init and offered to the host; a bad
// value, an environment that lets NCCL run LL or LL128, or no CUDA driver (this CI machine)
// fails the init call with a line saying why and offers nothing.
TEST_F(Interposer, P2pPoolNeedsAValidCountAndTheCudaDriver) {
  testing::RecordingHandler h;
  h.event_log = &g_events;
  ControlServer server(h, {});
  ::setenv("CRYSTAL_HOST", server.address().c_str(), 1);
  TestId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), 0);
  void* comm = nullptr;
  ::setenv("CRYSTAL_P2P_POOL", "2;1", 1);
  EXPECT_EQ(ncclCommInitRank(&comm, 8, id, 0), 5);  // ncclInvalidUsage
  // NCCL may run LL or LL128 (no NCCL_PROTO; send/recv under NCCL_P2P_LL_THRESHOLD): refused
  // before anything is allocated, as no one writes LL flags for the node's virtual GPUs.
  ::setenv("CRYSTAL_P2P_POOL", "2,1", 1);
  ::unsetenv("NCCL_PROTO");
  ::unsetenv("NCCL_P2P_LL_THRESHOLD");
  EXPECT_EQ(ncclCommInitRank(&comm, 8, id, 0), 5);
  ::setenv("NCCL_PROTO", "Simple", 1);
  EXPECT_EQ(ncclCommInitRank(&comm, 8, id, 0), 5) << "send/recv of 16 KiB or less run LL";
  ::setenv("NCCL_P2P_LL_THRESHOLD", "0", 1);
  if (::access("/dev/nvidiactl", F_OK) != 0) {  // no GPU driver here: allocation cannot start
    EXPECT_EQ(ncclCommInitRank(&comm, 8, id, 0), 2);  // ncclSystemError
  }
  ::unsetenv("NCCL_PROTO");
  ::unsetenv("NCCL_P2P_LL_THRESHOLD");
  ::setenv("CRYSTAL_P2P_POOL", "0,0", 1);  // nothing asked: nothing offered
  EXPECT_EQ(ncclCommInitRank(&comm, 8, id, 0), 0);
  ::unsetenv("CRYSTAL_P2P_POOL");
  std::lock_guard lock(h.mu);
  EXPECT_TRUE(h.pools.empty());
  EXPECT_EQ(std::count(g_events.begin(), g_events.end(), "host:BLOCK_POOL"), 0);
}

TEST_F(Interposer, ScalableInitRegistersItsFirstId) {
  testing::RecordingHandler h;
  ControlServer server(h, {});
  ::setenv("CRYSTAL_HOST", server.address().c_str(), 1);
  TestId ids[2] = {};
  ASSERT_EQ(ncclGetUniqueId(&ids[0]), 0);
  void* comm = nullptr;
  ASSERT_EQ(ncclCommInitRankScalable(&comm, 8192, 5, 1, ids, nullptr), 0);
  EXPECT_EQ(ncclCommInitRankScalable(&comm, 8192, 5, 2, ids, nullptr), 5);  // one root only
  std::lock_guard lock(h.mu);
  ASSERT_EQ(h.inits.size(), 1u);
  EXPECT_EQ(h.inits[0].nranks, 8192);
  EXPECT_EQ(h.inits[0].rank, 5);
}

TEST_F(Interposer, UnsupportedNcclVersionFailsTheCallWithAMessage) {
  testing::RecordingHandler h;
  ControlServer server(h, {});
  ::setenv("CRYSTAL_HOST", server.address().c_str(), 1);
  fakeNcclSetVersion(22803);
  TestId id{};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ncclGetUniqueId(&id), 5);  // ncclInvalidUsage
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ncclGetUniqueId: emulation host refused HELLO: NCCL 2.28.3"),
            std::string::npos)
      << err;
  EXPECT_TRUE(g_events.empty());
}

TEST_F(Interposer, HostAbsentFailsWithinTheTimeoutAndNeverCallsNccl) {
  testing::RecordingHandler h;
  std::string address;
  { address = ControlServer(h, {}).address(); }  // gone again
  ::setenv("CRYSTAL_HOST", address.c_str(), 1);
  ::setenv("CRYSTAL_TIMEOUT", "0.3", 1);
  TestId id{};
  void* comm = nullptr;
  ::testing::internal::CaptureStderr();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ncclCommInitRank(&comm, 64, id, 0), 6);  // ncclRemoteError
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(s, 1.0);
  EXPECT_NE(err.find("ncclCommInitRank: cannot reach the emulation host"), std::string::npos)
      << err;
  EXPECT_TRUE(g_events.empty());
  ::setenv("CRYSTAL_TIMEOUT", "soon", 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ncclCommInitRank(&comm, 64, id, 0), 5);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("CRYSTAL_TIMEOUT='soon'"),
            std::string::npos);
}

TEST_F(Interposer, HostDyingDuringCommInitFailsTheCallAtOnce) {
  // A host that says HELLO_OK, reads COMM_INIT and dies without answering.
  Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in sa = parseHostPort("127.0.0.1:0", "test");
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);
  socklen_t len = sizeof sa;
  ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  std::thread host([&] {
    Fd conn(::accept(listener.get(), nullptr, nullptr));
    const Deadline dl(5.0);
    for (int i = 0; i < 2; ++i) {
      std::uint8_t head[kHeaderSize];
      recvAll(conn.get(), head, dl);
      std::vector<std::uint8_t> payload(decodeHeader(head).length);
      recvAll(conn.get(), payload, dl);
      if (i == 0) sendAll(conn.get(), encode(HelloOk{}), dl);
    }
  });
  ::setenv("CRYSTAL_HOST", formatAddress(sa).c_str(), 1);
  TestId id{};
  void* comm = nullptr;
  ::testing::internal::CaptureStderr();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ncclCommInitRank(&comm, 64, id, 0), 6);  // ncclRemoteError
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  host.join();
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(
                "ncclCommInitRank: COMM_INIT to the emulation host at " + formatAddress(sa) +
                " failed: peer closed the connection"),
            std::string::npos);
  EXPECT_LT(s, 1.0);
  EXPECT_TRUE(g_events.empty());
}

TEST_F(Interposer, RefusedByTheHostMeansNcclIsNotCalled) {
  testing::RecordingHandler h;
  h.refuse = "rank 70 is outside the job's 64 ranks";
  ControlServer server(h, {});
  ::setenv("CRYSTAL_HOST", server.address().c_str(), 1);
  TestId id{};
  void* comm = nullptr;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ncclCommInitRank(&comm, 64, id, 70), 5);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("rank 70 is outside"), std::string::npos);
  EXPECT_TRUE(g_events.empty());
}

TEST_F(Interposer, SplitOfAnUnknownCommAndInitAllAreRefusedInEmulation) {
  testing::RecordingHandler h;
  ControlServer server(h, {});
  ::setenv("CRYSTAL_HOST", server.address().c_str(), 1);
  int not_a_comm = 0;
  void* child = nullptr;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ncclCommSplit(&not_a_comm, 0, 0, &child, nullptr), 5);
  void* comms[2] = {};
  EXPECT_EQ(ncclCommInitAll(comms, 2, nullptr), 5);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ncclCommSplit: the parent communicator was not created"), std::string::npos);
  EXPECT_NE(err.find("ncclCommInitAll: a single-process communicator"), std::string::npos);
  EXPECT_TRUE(g_events.empty());
}

TEST_F(Interposer, AForkedChildOpensItsOwnConnection) {
  testing::RecordingHandler h;
  ControlServer server(h, {});
  ::setenv("CRYSTAL_HOST", server.address().c_str(), 1);
  TestId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    TestId cid{};
    ::_exit(ncclGetUniqueId(&cid) == 0 && cid.internal[0] == 1 ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ASSERT_EQ(ncclGetUniqueId(&id), 0);  // the parent's stream is intact
  EXPECT_EQ(id.internal[0], 2);
  std::lock_guard lock(h.mu);
  EXPECT_EQ(h.pids, (std::vector<std::uint32_t>{static_cast<std::uint32_t>(::getpid()),
                                                static_cast<std::uint32_t>(child),
                                                static_cast<std::uint32_t>(::getpid())}));
}

TEST_F(Interposer, HostIdPrefixGivesEachProcessItsOwnNcclHostId) {
  ::setenv("CRYSTAL_HOSTID_PREFIX", "emu", 1);
  ::setenv("NCCL_HOSTID", "inherited-from-launcher", 1);
  TestId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), 0);
  EXPECT_EQ(std::string(std::getenv("NCCL_HOSTID")), "emu-" + std::to_string(::getpid()));
  ::unsetenv("NCCL_HOSTID");
}

}  // namespace
}  // namespace crystal::control
