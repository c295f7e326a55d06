// The production handler on the real bootstrap stand-in: ids minted by BootstrapHost reach
// the client, COMM_INIT declares the comm with the configured real ranks, bad requests are
// refused with a message, and the split resolver answers from the real ranks' choices.
#include "crystal/control/bootstrap_handler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "crystal/control/comm_hash.h"
#include "crystal/control/server.h"
#include "plugin/interpose/control_client.h"

namespace crystal::control {
namespace {

Config config64() {
  Config c;
  c.job.world_size = 64;
  c.emulation.real_ranks = {0, 1};
  return c;
}

TEST(BootstrapHandler, DeclaresTheWorldWithItsConfiguredRealRanks) {
  host::BootstrapHost host;
  host.start();
  const Config cfg = config64();
  BootstrapHandler handler(host, cfg, parseSplitRules("block:8"), 5);
  ControlServer server(handler, {});
  interpose::ControlClient c(server.address(), 5.0,
                             Hello{static_cast<std::uint32_t>(::getpid()), 22809, "h"});
  EXPECT_EQ(c.emulationId(), 5u);
  const UniqueId id = c.getUniqueId();
  EXPECT_EQ(id[8] | (id[9] << 8), AF_INET);  // root address family inside the id
  CommInit init;
  init.id = id;
  init.nranks = 64;
  init.rank = 0;
  init.comm_hash = commHashOfId(id);
  c.commInit(init);
  const auto comms = host.comms();
  const auto it = std::find_if(comms.begin(), comms.end(), [&](const host::CommStatus& s) {
    return s.comm_hash == init.comm_hash;
  });
  ASSERT_NE(it, comms.end());
  EXPECT_EQ(it->nranks, 64);
  auto reals = it->real_ranks;
  std::sort(reals.begin(), reals.end());
  EXPECT_EQ(reals, (std::vector<int>{0, 1}));  // rank 1 is real before it registers
  host.stop();
}

TEST(BootstrapHandler, RefusesBadRanksAndForeignHashes) {
  host::BootstrapHost host;
  host.start();
  const Config cfg = config64();
  BootstrapHandler handler(host, cfg, {}, 1);
  ControlServer server(handler, {});
  interpose::ControlClient c(server.address(), 5.0, Hello{1, 22809, ""});
  CommInit init;
  init.id = c.getUniqueId();
  init.nranks = 64;
  init.rank = 64;
  init.comm_hash = commHashOfId(init.id);
  try {
    c.commInit(init);
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(std::string(e.what()),
              "emulation host refused COMM_INIT: pid 1: rank 64 of a 64-rank communicator");
  }
  interpose::ControlClient c2(server.address(), 5.0, Hello{1, 22809, ""});
  init.rank = 3;
  init.comm_hash ^= 1;
  try {
    c2.commInit(init);
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("disagree on NCCL's commHash"), std::string::npos);
  }
  host.stop();
}

TEST(BootstrapHandler, SplitChildHashMustFollowNcclsRule) {
  host::BootstrapHost host;
  const Config cfg = config64();
  BootstrapHandler handler(host, cfg, {}, 1);
  const PeerInfo peer{1, 22809, "", ""};
  CommSplit ok{0x1234, 1, 3, 0, 0, 64, commHashOfSplit(0x1234, 1, 3)};
  EXPECT_NO_THROW(handler.commSplit(peer, ok));
  ok.child_hash ^= 1;
  EXPECT_THROW(handler.commSplit(peer, ok), ProtocolError);
  // Hash agreement with the host's own implementation of NCCL's hash.
  host::UniqueId hid;
  for (std::size_t i = 0; i < hid.bytes.size(); ++i) hid.bytes[i] = std::byte(i * 7);
  UniqueId cid{};
  for (std::size_t i = 0; i < cid.size(); ++i) cid[i] = static_cast<std::uint8_t>(i * 7);
  EXPECT_EQ(host::commHashOf(hid), commHashOfId(cid));
  EXPECT_EQ(host::splitCommHash(0xfeed, 2, 5), commHashOfSplit(0xfeed, 2, 5));
}

}  // namespace
}  // namespace crystal::control
