// The rank mapping in the LD_PRELOAD interposer, in front of the fake libnccl.so.2 of
// tests/cli: a program's k-rank communicator becomes the target's N-rank one (the host and
// NCCL see N and r_i), while the program keeps its own view (count k, rank i, its peers,
// blocks that fit its buffers).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/control/emulation_host.h"
#include "crystal/control/server.h"
#include "fake_nccl.h"
#include "plugin/interpose/rank_map.h"
#include "recording_handler.h"

extern "C" {
struct MapTestId {
  char internal[128];
};
int ncclGetUniqueId(MapTestId*);
int ncclCommInitRankConfig(void**, int, MapTestId, int, void*);
int ncclCommInitRank(void**, int, MapTestId, int);
int ncclCommDestroy(void*);
int ncclCommCount(void*, int*);
int ncclCommUserRank(void*, int*);
int ncclAllGather(const void*, void*, std::size_t, int, void*, void*);
int ncclReduceScatter(const void*, void*, std::size_t, int, int, void*, void*);
int ncclAlltoAll(const void*, void*, std::size_t, int, void*, void*);
int ncclSend(const void*, std::size_t, int, int, void*, void*);
int ncclRecv(void*, std::size_t, int, int, void*, void*);
int ncclBroadcast(const void*, void*, std::size_t, int, int, void*, void*);
int ncclBcast(void*, std::size_t, int, int, void*, void*);
}

namespace crystal::interpose {
namespace {

std::vector<std::string> g_events;
void hook(const char* e) { g_events.emplace_back(e); }

class RankMapInterposer : public ::testing::Test {
 protected:
  void SetUp() override {
    g_events.clear();
    fakeNcclSetHook(hook);
    fakeNcclSetVersion(22809);
    ::unsetenv("CRYSTAL_HOSTID_PREFIX");
    ::unsetenv("CRYSTAL_TIMEOUT");
    ::setenv("CRYSTAL_HOST", server_.address().c_str(), 1);
  }
  void TearDown() override {
    fakeNcclSetHook(nullptr);
    ::unsetenv("CRYSTAL_HOST");
    ::unsetenv(kEnvRankMap);
  }
  control::testing::RecordingHandler handler_;
  control::ControlServer server_{handler_, {}};
};

TEST_F(RankMapInterposer, TwoProgramRanksBecomeRanks0And4096Of8192) {
  ::setenv(kEnvRankMap, "8192:0,4096", 1);
  MapTestId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), 0);
  void* comm = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 2, id, 1, nullptr), 0);
  {
    std::lock_guard lock(handler_.mu);
    ASSERT_EQ(handler_.inits.size(), 1u);
    EXPECT_EQ(handler_.inits[0].nranks, 8192);
    EXPECT_EQ(handler_.inits[0].rank, 4096);
  }
  int n = 0, r = -1;
  ASSERT_EQ(ncclCommCount(comm, &n), 0);
  ASSERT_EQ(ncclCommUserRank(comm, &r), 0);
  EXPECT_EQ(n, 2);  // the program's view
  EXPECT_EQ(r, 1);
  g_events.clear();
  // all_gather_perf at 1 MiB of floats on 2 ranks: 131072 per rank -> 32 on 8192.
  ASSERT_EQ(ncclAllGather(nullptr, nullptr, 131072, 7, comm, nullptr), 0);
  ASSERT_EQ(ncclReduceScatter(nullptr, nullptr, 131072, 7, 0, comm, nullptr), 0);
  ASSERT_EQ(ncclAlltoAll(nullptr, nullptr, 131072, 7, comm, nullptr), 0);
  ASSERT_EQ(ncclSend(nullptr, 10, 7, 0, comm, nullptr), 0);  // program rank 0 = target 0
  ASSERT_EQ(ncclRecv(nullptr, 10, 7, 0, comm, nullptr), 0);
  ASSERT_EQ(ncclSend(nullptr, 10, 7, 1, comm, nullptr), 0);  // itself: target ring next
  ASSERT_EQ(ncclRecv(nullptr, 10, 7, 1, comm, nullptr), 0);  // and previous
  ASSERT_EQ(ncclSend(nullptr, 10, 7, 2, comm, nullptr), 0);  // not a program rank
  ASSERT_EQ(ncclBroadcast(nullptr, nullptr, 10, 7, 1, comm, nullptr), 0);
  ASSERT_EQ(ncclBcast(nullptr, 12, 7, 1, comm, nullptr), 0);  // mapped once, as ncclBroadcast
  EXPECT_EQ(g_events, (std::vector<std::string>{
                          "nccl:ncclAllGather count=32", "nccl:ncclReduceScatter count=32",
                          "nccl:ncclAlltoAll count=32", "nccl:ncclSend count=10 peer=0",
                          "nccl:ncclRecv count=10 peer=0", "nccl:ncclSend count=10 peer=4097",
                          "nccl:ncclRecv count=10 peer=4095", "nccl:ncclSend count=10 peer=-1",
                          "nccl:ncclBroadcast count=10 root=4096",
                          "nccl:ncclBroadcast count=12 root=4096"}));
  ASSERT_EQ(ncclCommDestroy(comm), 0);
}

TEST_F(RankMapInterposer, OtherSizesAndUnmappedRunsPassThrough) {
  ::setenv(kEnvRankMap, "64:5", 1);
  MapTestId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), 0);
  void* world = nullptr;
  ASSERT_EQ(ncclCommInitRank(&world, 64, id, 5), 0);  // already the target's size
  int n = 0;
  ASSERT_EQ(ncclCommCount(world, &n), 0);
  EXPECT_EQ(n, 64);
  g_events.clear();
  ASSERT_EQ(ncclAllGather(nullptr, nullptr, 100, 7, world, nullptr), 0);
  ASSERT_EQ(ncclSend(nullptr, 1, 7, 5, world, nullptr), 0);
  EXPECT_EQ(g_events, (std::vector<std::string>{"nccl:ncclAllGather count=100",
                                                "nccl:ncclSend count=1 peer=5"}));
  void* one = nullptr;
  ASSERT_EQ(ncclCommInitRank(&one, 1, id, 0), 0);  // k = 1: mapped to rank 5 of 64
  std::lock_guard lock(handler_.mu);
  ASSERT_EQ(handler_.inits.size(), 2u);
  EXPECT_EQ(handler_.inits[1].nranks, 64);
  EXPECT_EQ(handler_.inits[1].rank, 5);
}

TEST_F(RankMapInterposer, BadMapFailsTheInitWithItsName) {
  MapTestId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), 0);
  for (const char* bad : {"8192", "x:0", "0:0", "8:8", "8:1,1", "8:1,", "8:-1"}) {
    ::setenv(kEnvRankMap, bad, 1);
    void* comm = nullptr;
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), 5) << bad;  // ncclInvalidUsage
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("CRYSTAL_RANK_MAP"), std::string::npos) << bad << ": " << err;
  }
  ::setenv(kEnvRankMap, "8:3,4", 1);
  void* comm = nullptr;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), 5);  // rank 2 of a 2-rank comm
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("rank 2"), std::string::npos);
}

TEST(RankMap, LaunchEnvironmentCarriesTheMapOnlyWithMapComms) {
  Config c;
  c.job.world_size = 8192;
  c.emulation.real_ranks = {0, 4096};
  auto find = [](const control::EnvList& env) -> std::string {
    for (const auto& [k, v] : env)
      if (k == kEnvRankMap) return v;
    return "<unset>";
  };
  EXPECT_EQ(find(control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/lib.so", 1)),
            "<unset>");
  c.emulation.map_comms = true;
  const std::string map =
      find(control::launchEnvironment(c, "c.yaml", "127.0.0.1:1", "/p/lib.so", 1));
  EXPECT_EQ(map, "8192:0,4096");
  const RankMap m = parseRankMap(map);  // what the interposer reads back
  EXPECT_EQ(m.target_nranks, 8192);
  EXPECT_EQ(m.real_ranks, (std::vector<int>{0, 4096}));
}

TEST(RankMap, ParseAndPeers) {
  const RankMap m = parseRankMap("1024:0,512,1023");
  EXPECT_EQ(m.target_nranks, 1024);
  EXPECT_EQ(m.real_ranks, (std::vector<int>{0, 512, 1023}));
  MappedComm c{3, 2, 1024, 1023, std::make_shared<const std::vector<int>>(m.real_ranks)};
  EXPECT_EQ(targetPeer(c, 0, true), 0);
  EXPECT_EQ(targetPeer(c, 1, false), 512);
  EXPECT_EQ(targetPeer(c, 2, true), 0);  // itself: (1023 + 1) mod 1024
  EXPECT_EQ(targetPeer(c, 2, false), 1022);
  EXPECT_EQ(targetPeer(c, 3, true), -1);
  EXPECT_EQ(targetRoot(c, 1), 512);
  EXPECT_EQ(targetRoot(c, -1), -1);
  EXPECT_THROW((void)parseRankMap(":1"), InputError);
  EXPECT_THROW((void)parseRankMap("4:"), InputError);
}

}  // namespace
}  // namespace crystal::interpose
