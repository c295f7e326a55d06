// Faults: a real rank that breaks the protocol, runs another NCCL version, stalls or leaves
// fails its communicator with one clear error — the host itself keeps serving other comms.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "crystal/base/error.h"
#include "crystal/host/bootstrap_host.h"
#include "fake_rank.h"
#include "net.h"

namespace crystal::host {
namespace {

using test::FakeRank;

class HostFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    HostOptions o;
    o.stall_timeout = std::chrono::milliseconds(300);
    host = std::make_unique<BootstrapHost>(o);
    host->start();
  }
  // Waits up to 3 s for the first error whose text contains `needle`.
  std::string waitError(const std::string& needle) {
    for (int i = 0; i < 300; ++i) {
      for (const auto& e : host->errors())
        if (e.message.find(needle) != std::string::npos) return e.message;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::string all;
    for (const auto& e : host->errors()) all += e.message + "\n";
    return "no error containing '" + needle + "'; errors:\n" + all;
  }
  wire::BootstrapHandle handleOf(const UniqueId& id) {
    wire::BootstrapHandle h;
    std::memcpy(&h, id.bytes.data(), sizeof h);
    return h;
  }
  // Raw check-in (sendToRoot) of `rank` with listeners nobody serves.
  void rawCheckIn(const UniqueId& id, int rank, int nranks, test::Sock& root_l, test::Sock& ring_l,
                  int nroots = 1) {
    wire::ExtInfo info;
    info.rank = rank;
    info.nranks = nranks;
    info.nroots = nroots;
    info.listen_root_address = test::sockAddress(root_l);
    info.connect_info = wire::RingConnectInfo::fromAddr(test::sockAddress(ring_l));
    const auto h = handleOf(id);
    test::Sock s = test::connectTo(h.addr, h.magic);
    s.sendValue(static_cast<std::int32_t>(sizeof info));
    s.sendValue(info);
  }
  // A healthy 1-real comm completes init on the same host.
  void expectHealthyComm() {
    const UniqueId id = host->mintUniqueId();
    (void)host->declareComm(id, {8, {3}, kSupportedNcclVersion, "healthy"});
    FakeRank f(id, 3, 8);
    f.init();
    f.initAllGathers();
    ASSERT_EQ(f.peer_info.size(), 8u);
    EXPECT_EQ(f.peer_info[4].version, kSupportedNcclVersion);
    f.barrier();
    f.close();
  }
  std::unique_ptr<BootstrapHost> host;
};

TEST_F(HostFaults, DeclaringAnotherNcclVersionIsRefused) {
  const UniqueId id = host->mintUniqueId();
  try {
    (void)host->declareComm(id, {4, {0}, 22703, "w"});
    FAIL() << "declareComm accepted NCCL 2.27.3";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("22703"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2.28.9"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)host->declareComm(UniqueId{}, {4, {0}, 22809, "w"}), InputError);
  EXPECT_THROW((void)host->declareComm(id, {4, {4}, 22809, "w"}), InputError);
  EXPECT_TRUE(host->comms().empty());  // a refused declaration leaves nothing behind
  (void)host->declareComm(id, {4, {0}, 22809, "w"});
  EXPECT_THROW((void)host->declareComm(id, {8, {0}, 22809, "w"}), InputError);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // a stall-check round
  EXPECT_EQ(host->comms().size(), 1u);
}

TEST_F(HostFaults, IntraNodeExchangeWithAVirtualRankNamesTheHostId) {
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {4, {0}, kSupportedNcclVersion, "w"});
  FakeRank f(id, 0, 4);
  f.init();
  f.initAllGathers();
  f.bootstrapSend(1, wire::kTagIntraNodeAllGather, {});
  EXPECT_NE(waitError("intra-node").find("NCCL_HOSTID"), std::string::npos);
}

TEST_F(HostFaults, PeerInfoWithAnotherVersionFailsTheComm) {
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {4, {0}, kSupportedNcclVersion, "w"});
  FakeRank f(id, 0, 4);
  f.init();
  EXPECT_THROW(f.initAllGathers(22703), std::runtime_error);  // host closes its sockets
  const std::string err = waitError("22703");
  EXPECT_NE(err.find("rank 0"), std::string::npos) << err;
  EXPECT_NE(err.find("2.28.9"), std::string::npos) << err;
  expectHealthyComm();
}

TEST_F(HostFaults, DuplicateCheckIn) {
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {4, {0}, kSupportedNcclVersion, "w"});
  test::Sock a = test::listenLoopback(), b = test::listenLoopback();
  rawCheckIn(id, 0, 4, a, b);
  rawCheckIn(id, 0, 4, a, b);
  EXPECT_NE(waitError("checked in twice").find("rank 0"), std::string::npos);
  expectHealthyComm();
}

TEST_F(HostFaults, CheckInOfAVirtualRankOrWrongSize) {
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {4, {0}, kSupportedNcclVersion, "w"});
  test::Sock a = test::listenLoopback(), b = test::listenLoopback();
  rawCheckIn(id, 2, 4, a, b);
  EXPECT_NE(waitError("declares this rank virtual").find("rank 2"), std::string::npos);
  const UniqueId id2 = host->mintUniqueId();
  (void)host->declareComm(id2, {4, {0}, kSupportedNcclVersion, "w2"});
  rawCheckIn(id2, 0, 5, a, b);
  EXPECT_NE(waitError("nranks 5").find("expects nranks 4"), std::string::npos);
  const UniqueId id3 = host->mintUniqueId();
  (void)host->declareComm(id3, {4, {0}, kSupportedNcclVersion, "w3"});
  rawCheckIn(id3, 0, 4, a, b, 2);
  EXPECT_NE(waitError("nroots 2").find("one root"), std::string::npos);
  expectHealthyComm();
}

TEST_F(HostFaults, MalformedP2pMessageFailsOnlyItsComm) {
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {4, {0}, kSupportedNcclVersion, "w"});
  const auto h = handleOf(id);
  {
    test::Sock s = test::connectTo(aliasAddress(1, host->p2pPort()), h.magic);
    s.sendValue(static_cast<std::int32_t>(-1));
  }
  EXPECT_NE(waitError("socketAckInfo").find("size -1"), std::string::npos);
  {  // oversized connection-setup message
    const UniqueId id2 = host->mintUniqueId();
    (void)host->declareComm(id2, {4, {0}, kSupportedNcclVersion, "w2"});
    test::Sock s = test::connectTo(aliasAddress(1, host->p2pPort()), handleOf(id2).magic);
    s.sendValue(static_cast<std::int32_t>(8));
    s.sendValue(wire::SocketAck{0, (1 << 8) + 1});
    s.sendValue(static_cast<std::int32_t>(1 << 30));
  }
  EXPECT_NE(waitError("bootstrap message: bootstrap message").find("1073741824"),
            std::string::npos);
  {  // unknown magic: dropped silently, like NCCL's own listeners
    test::Sock s = test::connectTo(aliasAddress(1, host->p2pPort()), 0x1234);
    s.sendValue(static_cast<std::int32_t>(8));
  }
  expectHealthyComm();
  EXPECT_EQ(host->errors().size(), 2u);
}

TEST_F(HostFaults, RankThatNeverChecksInTimesOut) {
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {4, {0, 1}, kSupportedNcclVersion, "w"});
  test::Sock a = test::listenLoopback(), b = test::listenLoopback();
  const auto t0 = std::chrono::steady_clock::now();
  rawCheckIn(id, 0, 4, a, b);
  const std::string err = waitError("did not check in");
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(HostFaults, RankSilentInsideAnAllGatherTimesOut) {
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {4, {0}, kSupportedNcclVersion, "w"});
  FakeRank f(id, 0, 4);
  f.init();
  const std::int32_t size = 120;
  f.sendOnRing(std::as_bytes(std::span<const std::int32_t, 1>(&size, 1)));  // then nothing
  const std::string err = waitError("silent for 300 ms");
  EXPECT_NE(err.find("all-gather #0"), std::string::npos) << err;
  expectHealthyComm();
}

TEST_F(HostFaults, RankLeavingDuringInitFailsTheComm) {
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {4, {0}, kSupportedNcclVersion, "w"});
  {
    FakeRank f(id, 0, 4);
    f.init();
    f.close();
  }
  EXPECT_NE(waitError("ring connection closed during communicator creation").find("rank 0"),
            std::string::npos);
}

TEST_F(HostFaults, WrongAllGatherSizeFailsTheComm) {
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {4, {0}, kSupportedNcclVersion, "w"});
  FakeRank f(id, 0, 4);
  f.init();
  const std::int32_t size = 64;  // ringAllInfo must be 120 bytes
  f.sendOnRing(std::as_bytes(std::span<const std::int32_t, 1>(&size, 1)));
  EXPECT_NE(waitError("64-byte slices").find("ringAllInfo"), std::string::npos);
}

}  // namespace
}  // namespace crystal::host

namespace crystal::host {
namespace {
TEST_F(HostFaults, RealRankDeclaredAfterCheckInFailsTheComm) {
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {4, {0}, kSupportedNcclVersion, "w"});
  test::Sock a = test::listenLoopback(), b = test::listenLoopback();
  rawCheckIn(id, 0, 4, a, b);
  for (int i = 0; i < 100 && host->comms().front().phase == CommPhase::Declared; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  (void)host->declareComm(id, {4, {0, 1}, kSupportedNcclVersion, "w"});
  EXPECT_NE(waitError("declared real after").find("rank 1"), std::string::npos);
}
}  // namespace
}  // namespace crystal::host

namespace crystal::host {
namespace {
// A real rank that reaches ncclCommSplit later than the stall timeout after another real
// rank began the split all-gather is late, not stalled: no error, both finish.
class LateRank : public HostFaults, public ::testing::WithParamInterface<int> {};

TEST_P(LateRank, IsNotAStall) {
  host->setSplitResolver([](std::uint64_t, int, int r) { return SplitChoice{r % 2, r}; });
  const UniqueId id = host->mintUniqueId();
  const int other = GetParam();  // real, even (color 0 like rank 0)
  (void)host->declareComm(id, {8, {0, other}, kSupportedNcclVersion, "w"});
  auto run = [&](int rank, int delay_ms) {
    FakeRank f(id, rank, 8);
    f.init();
    f.initAllGathers();
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    auto child = f.split(0, rank);
    child->initAllGathers();  // leaving before the child's init completes would fail it
    const int n = child->nranks();
    child->close();
    f.close();
    return n;
  };
  auto early = std::async(std::launch::async, run, 0, 0);
  auto late = std::async(std::launch::async, run, other, 700);
  EXPECT_EQ(early.get(), 4);  // color 0: ranks 0, 2, 4, 6
  EXPECT_EQ(late.get(), 4);
  EXPECT_TRUE(host->errors().empty()) << host->errors().front().message;
}
INSTANTIATE_TEST_SUITE_P(HostFaults, LateRank, ::testing::Values(2, 4, 6));
}  // namespace
}  // namespace crystal::host
