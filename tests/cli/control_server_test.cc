// ControlServer over loopback, driven by the real client and by raw frames: id minting,
// comm registration, version refusal, order (HELLO first), malformed frames, refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include "crystal/control/codec.h"
#include "crystal/control/server.h"
#include "crystal/control/socket_io.h"
#include "plugin/interpose/control_client.h"
#include "recording_handler.h"

namespace crystal::control {
namespace {

using interpose::ControlClient;
using testing::RecordingHandler;

Hello hello(int version = kSupportedNcclVersion) {
  return Hello{static_cast<std::uint32_t>(::getpid()), version, "emu-test"};
}

TEST(ControlServer, MintsIdsAndRegistersComms) {
  RecordingHandler h;
  ControlServer server(h, {});
  ControlClient c(server.address(), 5.0, hello());
  EXPECT_EQ(c.emulationId(), 77u);
  const UniqueId a = c.getUniqueId();
  const UniqueId b = c.getUniqueId();
  EXPECT_EQ(a[0], 0);
  EXPECT_EQ(a[127], 127);
  EXPECT_EQ(b[0], 1);  // a fresh id per request
  CommInit init;
  init.id = a;
  init.nranks = 64;
  init.rank = 0;
  init.comm_hash = 42;
  c.commInit(init);
  c.commSplit(CommSplit{42, 1, 3, 0, 0, 64, 43});
  std::lock_guard lock(h.mu);
  ASSERT_EQ(h.inits.size(), 1u);
  EXPECT_EQ(h.inits[0].id, a);
  EXPECT_EQ(h.inits[0].nranks, 64);
  EXPECT_EQ(h.inits[0].comm_hash, 42u);
  ASSERT_EQ(h.splits.size(), 1u);
  EXPECT_EQ(h.splits[0].color, 3);
  EXPECT_EQ(h.splits[0].child_hash, 43u);
  EXPECT_EQ(h.pids, (std::vector<std::uint32_t>{static_cast<std::uint32_t>(::getpid()),
                                                static_cast<std::uint32_t>(::getpid())}));
  EXPECT_EQ(server.requestsServed(), 5u);
}

// BLOCK_POOL reaches the handler whole; a handler without p2p_peers refuses it by default.
// A NOTE reaches the handler too, and one that keeps none still takes it.
TEST(ControlServer, BlockPoolReachesTheHandler) {
  RecordingHandler h;
  ControlServer server(h, {});
  ControlClient c(server.address(), 5.0, hello());
  BlockPool pool;
  pool.comm_hash = 42;
  pool.rank = 3;
  pool.recv_block_bytes = 10485760;
  pool.send_block_bytes = 2097152;
  pool.recv = {0x7f0000000000ull, 0x7f0000a00000ull};
  pool.send = {0x7f0001400000ull};
  const PoolPlace place = c.blockPool(pool);
  EXPECT_EQ(place.members, 8);  // the recording handler's answer, decoded
  EXPECT_EQ(place.next, 4);
  {
    std::lock_guard lock(h.mu);
    ASSERT_EQ(h.pools.size(), 1u);
    EXPECT_EQ(h.pools[0].rank, 3);
    EXPECT_EQ(h.pools[0].recv, pool.recv);
    EXPECT_EQ(h.pools[0].send, pool.send);
  }
  const Writes w = c.getWrites({0x1234, 9});  // the recording handler echoes the request
  ASSERT_EQ(w.writes.size(), 1u);
  EXPECT_EQ(w.writes[0].address, 0x1234u);
  EXPECT_EQ(w.writes[0].value, 9u);
  c.note({"P2P pacing of comm 0x2a rank 3 stopped"});
  {
    std::lock_guard lock(h.mu);
    EXPECT_EQ(h.notes, std::vector<std::string>{"P2P pacing of comm 0x2a rank 3 stopped"});
  }
  struct Plain : ControlHandler {
    UniqueId mintUniqueId(const PeerInfo&) override { return {}; }
    void commInit(const PeerInfo&, const CommInit&) override {}
    void commSplit(const PeerInfo&, const CommSplit&) override {}
  } plain;
  ControlServer plain_server(plain, {});
  ControlClient p(plain_server.address(), 5.0, hello());
  p.note({"taken and kept nowhere"});  // every handler takes a note
  try {
    (void)p.blockPool(pool);
    FAIL() << "a handler without p2p_peers took a block pool";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("no emulation.p2p_peers"), std::string::npos) << e.what();
  }
}

TEST(ControlServer, RefusesOtherNcclVersionsWithAClearMessage) {
  RecordingHandler h;
  ControlServer server(h, {});
  try {
    ControlClient c(server.address(), 5.0, hello(22803));
    FAIL() << "NCCL 2.28.3 was accepted";
  } catch (const ProtocolError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("NCCL 2.28.3 (version code 22803)"), std::string::npos) << text;
    EXPECT_NE(text.find("verified for NCCL 2.28.9 only"), std::string::npos) << text;
  }
  EXPECT_EQ(h.minted, 0);
}

TEST(ControlServer, HandlerRefusalReachesTheClientAndKeepsTheConnection) {
  RecordingHandler h;
  h.refuse = "comm of 64 ranks: rank 70 out of range";
  ControlServer server(h, {});
  ControlClient c(server.address(), 5.0, hello());
  try {
    c.commInit(CommInit{});
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(std::string(e.what()),
              "emulation host refused COMM_INIT: comm of 64 ranks: rank 70 out of range");
  }
}

// Sends raw bytes, returns the decoded reply.
Message rawExchange(const std::string& address, const std::vector<std::uint8_t>& bytes) {
  int err = 0;
  const Deadline dl(5.0);
  Fd fd = tryConnect(parseHostPort(address, "test"), dl, err);
  EXPECT_TRUE(fd.valid());
  sendAll(fd.get(), bytes, dl);
  std::uint8_t head[kHeaderSize];
  recvAll(fd.get(), head, dl);
  const Header h = decodeHeader(head);
  std::vector<std::uint8_t> payload(h.length);
  recvAll(fd.get(), payload, dl);
  return decodePayload(h.type, payload);
}

TEST(ControlServer, RequestBeforeHelloIsRefused) {
  RecordingHandler h;
  ControlServer server(h, {});
  const auto reply = rawExchange(server.address(), encode(GetUniqueId{}));
  EXPECT_EQ(std::get<Error>(reply).text,
            "GET_UNIQUE_ID before HELLO: the interposer must introduce itself first");
  EXPECT_EQ(h.minted, 0);
}

TEST(ControlServer, MalformedFrameGetsAnErrorAndTheServerKeepsServing) {
  RecordingHandler h;
  ControlServer server(h, {});
  auto bad = encode(Hello{1, 22809, "x"});
  bad[0] = 'Z';
  const auto reply = rawExchange(server.address(), bad);
  EXPECT_NE(std::get<Error>(reply).text.find("bad magic"), std::string::npos);
  // A host -> interposer message sent to the host.
  auto frames = encode(hello());
  const auto extra = encode(Ok{});
  frames.insert(frames.end(), extra.begin(), extra.end());
  {
    int err = 0;
    const Deadline dl(5.0);
    Fd fd = tryConnect(parseHostPort(server.address(), "test"), dl, err);
    sendAll(fd.get(), frames, dl);
    for (int i = 0; i < 2; ++i) {
      std::uint8_t head[kHeaderSize];
      recvAll(fd.get(), head, dl);
      const Header hd = decodeHeader(head);
      std::vector<std::uint8_t> payload(hd.length);
      recvAll(fd.get(), payload, dl);
      const auto m = decodePayload(hd.type, payload);
      if (i == 0) {
        EXPECT_TRUE(std::holds_alternative<HelloOk>(m));
      } else {
        EXPECT_NE(std::get<Error>(m).text.find("unexpected OK"), std::string::npos);
      }
    }
  }
  // Still serving.
  ControlClient c(server.address(), 5.0, hello());
  EXPECT_EQ(c.getUniqueId()[0], 0);
}

TEST(ControlServer, ReportsPeersThatLeave) {
  RecordingHandler h;
  ControlServer server(h, {});
  { ControlClient c(server.address(), 5.0, hello()); }
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lock(h.mu);
      if (!h.gone.empty()) break;
    }
    ::usleep(5000);
  }
  std::lock_guard lock(h.mu);
  EXPECT_EQ(h.gone, std::vector<std::uint32_t>{static_cast<std::uint32_t>(::getpid())});
}

TEST(ControlServer, BadListenAddressIsAnInputError) {
  RecordingHandler h;
  EXPECT_THROW(ControlServer(h, {.listen = "127.0.0.1"}), InputError);
  EXPECT_THROW(ControlServer(h, {.listen = "127.0.0.1:99999"}), InputError);
}

}  // namespace
}  // namespace crystal::control
