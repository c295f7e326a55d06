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

// A communicator larger than the target job holds ranks no layout of it knows, and a world
// rank the config makes virtual cannot be a process's: both are refused at COMM_INIT with a
// line saying what to change, before NCCL starts (the real rank's init fails at once instead
// of waiting for ranks that never come). Smaller communicators and the configured real ranks
// pass.
TEST(BootstrapHandler, RefusesRanksTheEmulationDoesNotKnow) {
  host::BootstrapHost host;
  host.start();
  const Config cfg = config64();  // world 64, real ranks 0 and 1
  BootstrapHandler handler(host, cfg, {}, 1);
  ControlServer server(handler, {});
  const auto refusal = [&](int nranks, int rank) -> std::string {
    interpose::ControlClient c(server.address(), 5.0, Hello{7, 22809, ""});
    CommInit init;
    init.id = c.getUniqueId();
    init.nranks = nranks;
    init.rank = rank;
    init.comm_hash = commHashOfId(init.id);
    try {
      c.commInit(init);
    } catch (const ProtocolError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(refusal(128, 0),
            "emulation host refused COMM_INIT: pid 7: rank 0 of a 128-rank communicator, but the "
            "target job has 64 ranks (job.world_size): ranks 64..127 are peers this emulation "
            "does not know; create it with at most 64 ranks or raise job.world_size");
  EXPECT_EQ(refusal(64, 3),
            "emulation host refused COMM_INIT: pid 7: rank 3 of the 64-rank world communicator "
            "is virtual in this emulation (emulation.real_ranks: [0, 1]): a real process cannot "
            "take its place; start it as one of those ranks or add 3 to emulation.real_ranks");
  EXPECT_EQ(refusal(64, 1), "");  // a configured real rank
  EXPECT_EQ(refusal(8, 3), "");   // a smaller communicator: any rank of it
  EXPECT_EQ(host.comms().size(), 2u);  // the refused ones left nothing behind
  host.stop();
}

// Notes of lost faithfulness are kept for the report, with the sender's pid, in arrival
// order, at most kMaxNotes of them and then one line counting the rest.
TEST(BootstrapHandler, KeepsTheRealRanksNotesForTheReport) {
  host::BootstrapHost host;
  const Config cfg = config64();
  BootstrapHandler handler(host, cfg, {}, 1);
  EXPECT_TRUE(handler.notes().empty());
  handler.note(PeerInfo{41, 22809, "", ""}, Note{"P2P pacing of comm 0x1 rank 0 stopped"});
  handler.note(PeerInfo{42, 22809, "", ""}, Note{"second"});
  EXPECT_EQ(handler.notes(), (std::vector<std::string>{
                                 "pid 41: P2P pacing of comm 0x1 rank 0 stopped", "pid 42: second"}));
  for (std::size_t i = 2; i < BootstrapHandler::kMaxNotes + 5; ++i)
    handler.note(PeerInfo{43, 22809, "", ""}, Note{"n"});
  const auto notes = handler.notes();
  ASSERT_EQ(notes.size(), BootstrapHandler::kMaxNotes + 1);
  EXPECT_EQ(notes.back(), "5 more notes not kept");
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
