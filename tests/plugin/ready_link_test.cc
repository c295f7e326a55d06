// Peer-ready connections made by NetContext (plugin/state.cc): a NET peer's transfers take
// turns of the rank's proxy (LinkParams::request_ns), an NVLink peer's do not. Virtual clock.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "state.h"

namespace crystal::plugin {
namespace {

// Rank 0 of 64 (8 nodes of 8), a proxy turn of 20 us (model.overrides.net_request_us) so
// that it dominates the links' own times: 4 sends posted at once to NET peers of an
// all-to-all complete a turn apart; 4 to NVLink peers of rank 0's node complete at the link's
// own time. Receives from NET peers queue on the same proxy.
TEST(ReadyLinks, NetPeersTakeTurnsOfTheProxyNvlinkPeersDoNot) {
  Config cfg;
  cfg.source = "test";
  cfg.cluster.nodes = 8;
  cfg.cluster.gpus_per_node = 8;
  cfg.model.overrides.emplace_back("net_request_us", 20.0);
  PluginState::get().configure(cfg);
  NetContext ctx;
  auto conn = [](int peer, bool send) {
    VirtualConn c;
    c.send = send;
    c.comm_id = 0x51;
    c.self_rank = 0;
    c.peer_rank = peer;
    c.nranks = 64;
    c.distance = peer;
    c.graph = live::kGraphP2p;
    return c;
  };
  constexpr live::TimeNs kTurn = 20'000;
  std::vector<std::shared_ptr<live::VirtualLink>> keep;
  std::vector<live::TimeNs> net, nvl;
  for (int p = 0; p < 4; ++p) {
    keep.push_back(ctx.virtualLink(conn(8 + 8 * p, true), 0));
    net.push_back(keep.back()->postSend(0, 1024));
    keep.push_back(ctx.virtualLink(conn(1 + p, true), 0));
    nvl.push_back(keep.back()->postSend(0, 1024));
  }
  ASSERT_EQ(keep[0]->params().request_ns, kTurn);
  EXPECT_EQ(keep[1]->params().request_ns, 0) << "NVLink: no proxy";
  for (int p = 1; p < 4; ++p) {
    EXPECT_EQ(net[p] - net[p - 1], kTurn) << p;
    EXPECT_LT(nvl[p] - nvl[p - 1], 1000) << p << ": NVLink sends only queue on the port";
  }
  EXPECT_LT(net[0], kTurn) << "the first pays the link's time only";
  // A receive from a NET peer posted now completes after the sends' turns.
  auto recv = ctx.virtualLink(conn(40, false), 0);
  recv->postRecv(0, 0, true);
  EXPECT_EQ(recv->recvArrival(0, 0, 1024, 0), net[3] + kTurn);
  PluginState::get().configure(Config{});
}

}  // namespace
}  // namespace crystal::plugin
