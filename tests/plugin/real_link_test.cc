// The timing of a real<->real connection is the target's link between the two ranks
// (NetContext::realLink): NVLink when they share a target node, the NET link otherwise or when
// a rank is unknown. The ranks travel in the listen handle and the Hello (live/handle.h).
#include <gtest/gtest.h>

#include "real_pair_fixture.h"

namespace crystal::test {
namespace {

using plugin::NetContext;
using plugin::PluginState;

class RealLinkTest : public RealPairTest {
 protected:
  NetContext* context(void* ctx) { return PluginState::get().checkContext(ctx); }
  static int count(const std::string& text, const std::string& what) {
    int n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
      ++n;
    return n;
  }
};

TEST_F(RealLinkTest, SameTargetNodeIsNvlinkOtherwiseTheNetLink) {
  PluginState& st = PluginState::get();
  NetContext* c = context(ctx_);
  const live::CommLinks links = live::commLinks(st.model(), st.config().cluster, 64);
  ASSERT_EQ(links.shape.ranks_per_node, 8);
  ASSERT_NE(links.nvl.latency_ns, st.link().latency_ns) << "the test needs two different links";
  const NetContext::RealLink same = c->realLink(0, 7, 64, 0, true);
  EXPECT_TRUE(same.nvlink);
  EXPECT_EQ(same.link.latency_ns, links.nvl.latency_ns);
  EXPECT_DOUBLE_EQ(same.link.ns_per_byte, links.nvl.ns_per_byte);
  EXPECT_EQ(same.port, st.nvlOut());
  EXPECT_EQ(c->realLink(9, 14, 64, 0, false).port, st.nvlIn());
  for (const auto& [self, peer, nranks] : {std::tuple{0, 8, 64},
                                           {7, 8, 64},
                                           {-1, 1, 64},
                                           {0, -1, 64},
                                           {3, 3, 64},
                                           {0, 1, 0},
                                           {0, 64, 64},
                                           {0, 1, 1 << 30}}) {
    SCOPED_TRACE(fmt::format("ranks {} and {} of {}", self, peer, nranks));
    const NetContext::RealLink other = c->realLink(self, peer, nranks, 0, true);
    EXPECT_FALSE(other.nvlink);
    EXPECT_EQ(other.link.latency_ns, st.link().latency_ns);
    EXPECT_EQ(other.port, st.nic(0).out);
  }
}

// Two real ranks of one target node, each its own comm context as in two processes: both sides
// learn both ranks and time the connection as NVLink; a rank the receiver does not recognise
// (the Hello names another) leaves it on the NET link.
TEST_F(RealLinkTest, RanksTravelInTheHandleAndTheHello) {
  void* ctx_b = nullptr;
  const std::uint64_t comm_a = 0xa11ce, comm_b = 0xb0b;
  ASSERT_EQ(net::init(&ctx_b, comm_b, nullptr, captureLog, nullptr), ncclSuccess);
  void* ctx_a = nullptr;
  ASSERT_EQ(net::init(&ctx_a, comm_a, nullptr, captureLog, nullptr), ncclSuccess);
  PluginState::get().setCommRank(comm_a, 2, 64);
  PluginState::get().setCommRank(comm_b, 3, 64);
  void *s = nullptr, *r = nullptr;
  ASSERT_NO_FATAL_FAILURE(connectPair(ctx_a, ctx_b, &s, &r, [](live::NetHandle& h) {
    EXPECT_EQ(h.rank, 3);
    EXPECT_EQ(h.nranks, 64);
  }));
  EXPECT_EQ(count(logText(), "ranks 2 and 3 share a target node: timed as its NVLink"), 1);
  EXPECT_EQ(count(logText(), "ranks 3 and 2 share a target node: timed as its NVLink"), 1);
  // Bytes still move (host buffers: TCP or the shared-memory stream).
  Buffer src(4096), dst(4096);
  regBoth(s, r, src, dst, nccl::NCCL_PTR_HOST);
  std::memset(src.at(0), 0x5a, 4096);
  EXPECT_EQ(exchangeSteps(s, r, src, dst, 2, 2048), 4u);
  EXPECT_EQ(std::memcmp(src.at(0), dst.at(0), 4096), 0);

  // The receiver's comm now says rank 9 (another node): the Hello's 3 is not its rank, so
  // neither side's view is trusted there.
  PluginState::get().setCommRank(comm_b, 9, 64);
  clearCapturedLog();
  void *s2 = nullptr, *r2 = nullptr;
  ASSERT_NO_FATAL_FAILURE(
      connectPair(ctx_a, ctx_b, &s2, &r2, [](live::NetHandle& h) { h.rank = 3; }));  // stale
  EXPECT_EQ(count(logText(), "ranks 2 and 3 share a target node"), 1) << "the sender's view";
  EXPECT_EQ(count(logText(), "ranks not known on both sides: timed as the target's NET link"), 1)
      << logText();
  for (void* c : sends_) (void)net::closeSend(c);
  for (void* c : recvs_) (void)net::closeRecv(c);
  for (void* c : listens_) (void)net::closeListen(c);
  sends_.clear();
  recvs_.clear();
  listens_.clear();
  EXPECT_EQ(net::finalize(ctx_a), ncclSuccess);
  EXPECT_EQ(net::finalize(ctx_b), ncclSuccess);
}

}  // namespace
}  // namespace crystal::test
