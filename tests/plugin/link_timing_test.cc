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
  EXPECT_FALSE(recv.recvArrival(0, 0, 50'000).has_value());  // sender not at step 0 yet
  (void)send->postSend(5000, 50'000);
  EXPECT_EQ(recv.recvArrival(0, 0, 50'000), 5000 + 1000 + 1000);
  // Unpaired receive: timed from its own post.
  VirtualLink lone(LinkParams{1000, 0.02}, std::make_shared<PortQueue>());
  EXPECT_EQ(lone.recvArrival(0, 300, 50'000), 300 + 1000 + 1000);
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
