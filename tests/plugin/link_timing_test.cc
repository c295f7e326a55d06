// The live timing model: port serialisation, latency overlap, ring symmetry.
#include <gtest/gtest.h>

#include "crystal/live/link_timing.h"
#include "crystal/live/target_model.h"

namespace crystal::live {
namespace {

TEST(LinkTiming, SendsSerialiseOnThePortAndOverlapLatency) {
  auto port = std::make_shared<PortQueue>();
  VirtualLink l(LinkParams{1000, 0.02}, port);  // 1 us, 50 GB/s
  EXPECT_EQ(l.postSend(0, 50'000), 1000 + 1000);      // occupies [0, 1000)
  EXPECT_EQ(l.postSend(100, 50'000), 2000 + 1000);    // waits for the port
  EXPECT_EQ(l.postSend(10'000, 0), 10'000 + 1000);    // idle port: latency only
}

TEST(LinkTiming, ReceiveWaitsForSymmetricSender) {
  auto out = std::make_shared<PortQueue>();
  auto in = std::make_shared<PortQueue>();
  auto send = std::make_shared<VirtualLink>(LinkParams{1000, 0.02}, out);
  VirtualLink recv(LinkParams{1000, 0.02}, in);
  recv.pairWith(send->log());
  // Posted at 0; a ready peer would deliver at 0 + 1000 + 1000. Before that, wait.
  EXPECT_FALSE(recv.recvArrival(0, 0, 50'000, 0).has_value());
  EXPECT_FALSE(recv.recvArrival(0, 0, 50'000, 1999).has_value());
  (void)send->postSend(1500, 50'000);  // the symmetric sender reaches step 0 at 1500
  EXPECT_EQ(recv.recvArrival(0, 0, 50'000, 1999), 1500 + 1000 + 1000);
  // Unpaired receive: timed from its own post.
  VirtualLink lone(LinkParams{1000, 0.02}, std::make_shared<PortQueue>());
  EXPECT_EQ(lone.recvArrival(0, 300, 50'000, 300), 300 + 1000 + 1000);
}

TEST(LinkTiming, WrongPairingNeverBlocksAReceive) {
  // Tree/PAT receives precede the real rank's sends: a paired sender that never reaches
  // the step must not hold the receive past the arrival from a ready peer.
  auto send = std::make_shared<VirtualLink>(LinkParams{1000, 0.02}, std::make_shared<PortQueue>());
  VirtualLink recv(LinkParams{1000, 0.02}, std::make_shared<PortQueue>());
  recv.pairWith(send->log());
  EXPECT_FALSE(recv.recvArrival(0, 100, 50'000, 2099).has_value());
  EXPECT_EQ(recv.recvArrival(0, 100, 50'000, 2100), 100 + 1000 + 1000);
  // The next step queues behind the first on the inbound port.
  EXPECT_EQ(recv.recvArrival(1, 100, 50'000, 5000), 1100 + 1000 + 1000);
}

TEST(LinkTiming, ProgressingSenderIsWaitedFor) {
  // A ring posts receives 8 ahead: receive 8 waits for send 8 while sends 0..7 keep coming.
  const LinkParams lp{1000, 0.02};  // step time for 50'000 B: 2000 ns
  auto send = std::make_shared<VirtualLink>(lp, std::make_shared<PortQueue>());
  VirtualLink recv(lp, std::make_shared<PortQueue>());
  recv.pairWith(send->log());
  for (int k = 0; k < 8; ++k) (void)send->postSend(k * 2000, 50'000);
  // Receive 8 posted at 0; at 20'000 the sender last posted at 14'000 (progressing).
  EXPECT_FALSE(recv.recvArrival(8, 0, 50'000, 20'000).has_value());
  (void)send->postSend(21'000, 50'000);
  EXPECT_EQ(recv.recvArrival(8, 0, 50'000, 21'500), 21'000 + 1000 + 1000);
  // Receive 9: the sender stops; after 4 step times + 200 us of silence it is unpaired.
  EXPECT_FALSE(recv.recvArrival(9, 0, 50'000, 21'000 + 8000 + 200'000).has_value());
  EXPECT_TRUE(recv.recvArrival(9, 0, 50'000, 21'000 + 8000 + 200'001).has_value());
}

TEST(LinkTiming, BuiltInTargetLinkOfTheClosedFormModel) {
  Config cfg;
  auto m = makeClusterTargetModel(cfg);
  const LinkParams lp = linkParams(*m, cfg.cluster);
  EXPECT_EQ(lp.latency_ns, 2750);  // 2 us NIC + 3 hops x 0.25 us
  EXPECT_DOUBLE_EQ(lp.ns_per_byte, 1.0 / 50.0);
  cfg.cluster.fabric.nic.bandwidth_GBps = 25.0;  // the port's line rate caps the model
  EXPECT_DOUBLE_EQ(linkParams(*makeTargetModel(cfg), cfg.cluster).ns_per_byte, 1.0 / 25.0);
}

}  // namespace
}  // namespace crystal::live
