// Control frames: every message type round-trips bit-exactly; malformed frames are refused
// with a ProtocolError naming the field and offset.
#include <gtest/gtest.h>

#include <cstring>

#include "crystal/control/codec.h"

namespace crystal::control {
namespace {

Message roundTrip(const Message& m) {
  const auto frame = encode(m);
  const Header h = decodeHeader(frame);
  EXPECT_EQ(h.length, frame.size() - kHeaderSize);
  return decodePayload(h.type, std::span(frame).subspan(kHeaderSize));
}

TEST(ControlCodec, HelloRoundTripsWithSizes) {
  const auto frame = encode(Hello{4242, 22809, "emu-4242"});
  EXPECT_EQ(frame.size(), kHeaderSize + 4 + 4 + 4 + 8);
  const auto m = std::get<Hello>(roundTrip(Hello{4242, 22809, "emu-4242"}));
  EXPECT_EQ(m.pid, 4242u);
  EXPECT_EQ(m.nccl_version, 22809);
  EXPECT_EQ(m.hostid, "emu-4242");
}

TEST(ControlCodec, CommInitAndSplitRoundTrip) {
  CommInit init;
  for (std::size_t i = 0; i < init.id.size(); ++i) init.id[i] = static_cast<std::uint8_t>(i * 3);
  init.nranks = 8192;
  init.rank = 5;
  init.n_ids = 1;
  init.comm_hash = 0x0123456789abcdefull;
  EXPECT_EQ(encode(init).size(), kHeaderSize + 128 + 4 + 4 + 4 + 8);
  const auto gi = std::get<CommInit>(roundTrip(init));
  EXPECT_EQ(gi.id, init.id);
  EXPECT_EQ(gi.nranks, 8192);
  EXPECT_EQ(gi.rank, 5);
  EXPECT_EQ(gi.comm_hash, 0x0123456789abcdefull);

  const CommSplit split{0xfeedull, 3, -1, 17, 9, 64, 0xbeefull};
  const auto gs = std::get<CommSplit>(roundTrip(split));
  EXPECT_EQ(gs.parent_hash, 0xfeedull);
  EXPECT_EQ(gs.split_seq, 3u);
  EXPECT_EQ(gs.color, -1);
  EXPECT_EQ(gs.key, 17);
  EXPECT_EQ(gs.parent_rank, 9);
  EXPECT_EQ(gs.parent_nranks, 64);
  EXPECT_EQ(gs.child_hash, 0xbeefull);
}

TEST(ControlCodec, RepliesRoundTrip) {
  EXPECT_EQ(std::get<HelloOk>(roundTrip(HelloOk{99})).emulation_id, 99u);
  UniqueIdReply r;
  r.id.fill(0x5a);
  EXPECT_EQ(std::get<UniqueIdReply>(roundTrip(r)).id, r.id);
  EXPECT_TRUE(std::holds_alternative<Ok>(roundTrip(Ok{})));
  EXPECT_TRUE(std::holds_alternative<GetUniqueId>(roundTrip(GetUniqueId{})));
  EXPECT_EQ(std::get<Error>(roundTrip(Error{"no such comm"})).text, "no such comm");
  EXPECT_EQ(std::get<Note>(roundTrip(Note{"P2P pacing stopped"})).text, "P2P pacing stopped");
  EXPECT_EQ(std::get<Note>(roundTrip(Note{std::string(5000, 'n')})).text.size(), kMaxErrorText);
  EXPECT_STREQ(typeName(MsgType::Note), "NOTE");
}

TEST(ControlCodec, LongTextIsCutAtTheLimit) {
  const auto m = std::get<Hello>(roundTrip(Hello{1, 22809, std::string(500, 'h')}));
  EXPECT_EQ(m.hostid.size(), kMaxHostIdSize);
}

void expectRefused(std::span<const std::uint8_t> frame, const std::string& needle) {
  try {
    const Header h = decodeHeader(frame);
    (void)decodePayload(h.type, frame.subspan(kHeaderSize));
    FAIL() << "accepted a malformed frame";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// BLOCK_POOL: addresses in order, both block sizes; more than kMaxPoolBlocks are refused.
TEST(ControlCodec, BlockPoolRoundTripsAndIsBounded) {
  BlockPool pool;
  pool.comm_hash = 0xabcdef;
  pool.rank = 13;
  pool.recv_block_bytes = 10485760;
  pool.send_block_bytes = 2097152;
  pool.recv = {0x7f0000000000ull, 0x7f0000a00000ull};
  pool.send = {0x7f0001400000ull};
  EXPECT_EQ(encode(pool).size(), kHeaderSize + 8 + 4 + 8 + 8 + 4 + 4 + 3 * 8);
  const auto got = std::get<BlockPool>(roundTrip(pool));
  EXPECT_EQ(got.comm_hash, 0xabcdefu);
  EXPECT_EQ(got.rank, 13);
  EXPECT_EQ(got.recv_block_bytes, 10485760u);
  EXPECT_EQ(got.send_block_bytes, 2097152u);
  EXPECT_EQ(got.recv, pool.recv);
  EXPECT_EQ(got.send, pool.send);
  auto frame = encode(pool);
  const std::uint32_t huge = 600;  // n_recv at payload offset 28
  std::memcpy(frame.data() + kHeaderSize + 28, &huge, 4);
  EXPECT_THROW((void)decodePayload(MsgType::BlockPool, std::span(frame).subspan(kHeaderSize)),
               ProtocolError);
  frame = encode(pool);
  frame.pop_back();  // the last address cut
  EXPECT_THROW((void)decodePayload(MsgType::BlockPool, std::span(frame).subspan(kHeaderSize)),
               ProtocolError);
}

TEST(ControlCodec, WritesRoundTripAndAreBounded) {
  const auto gw = std::get<GetWrites>(roundTrip(GetWrites{0x77, 5}));
  EXPECT_EQ(gw.comm_hash, 0x77u);
  EXPECT_EQ(gw.rank, 5);
  Writes w;
  w.writes = {{0x7f00000000ull, 1ull << 62, 0xa0000000, 1, 8, 0, 0x101},
              {0x7f00200000ull, 3, 0xb0000000, 7, 8, 5, 0x100}};
  EXPECT_EQ(encode(w).size(), kHeaderSize + 4 + 2 * 40);
  EXPECT_LE(encode(Writes{std::vector<DeviceWrite>(kMaxWrites)}).size(), kHeaderSize + kMaxPayload);
  const auto got = std::get<Writes>(roundTrip(w));
  ASSERT_EQ(got.writes.size(), 2u);
  EXPECT_EQ(got.writes[1].address, 0x7f00200000u);
  EXPECT_EQ(got.writes[0].value, 1ull << 62);
  EXPECT_EQ(got.writes[1].watch, 0xb0000000u);
  EXPECT_EQ(got.writes[1].peer, 7);
  EXPECT_EQ(got.writes[1].nranks, 8);
  EXPECT_EQ(got.writes[1].ordinal, 5);
  EXPECT_TRUE(got.writes[0].send());
  EXPECT_FALSE(got.writes[1].send());
  EXPECT_EQ(got.writes[0].graph(), 1);
  EXPECT_TRUE(std::get<Writes>(roundTrip(Writes{})).writes.empty());
  auto frame = encode(w);
  const std::uint32_t huge = kMaxWrites + 1;
  std::memcpy(frame.data() + kHeaderSize, &huge, 4);
  EXPECT_THROW((void)decodePayload(MsgType::Writes, std::span(frame).subspan(kHeaderSize)),
               ProtocolError);
}

// POOL_PLACE: a rank index on a node of `members`, or members 0 with index -1; nothing else.
TEST(ControlCodec, PoolPlaceRoundTripsAndIsChecked) {
  EXPECT_EQ(encode(PoolPlace{8, 12, 14, 2}).size(), kHeaderSize + 16);
  const auto got = std::get<PoolPlace>(roundTrip(PoolPlace{8, 12, 14, 2}));
  EXPECT_EQ(got.members, 8);
  EXPECT_EQ(got.prev, 12);
  EXPECT_EQ(got.next, 14);
  EXPECT_EQ(got.tree_channels, 2);
  EXPECT_EQ(std::get<PoolPlace>(roundTrip(PoolPlace{})).members, 0);
  for (const PoolPlace bad :
       {PoolPlace{-2}, PoolPlace{8, -2, 1}, PoolPlace{8, 7, -5}, PoolPlace{8, 7, 1, 65},
        PoolPlace{8, 7, 1, -1}}) {
    const auto frame = encode(bad);
    EXPECT_THROW((void)decodePayload(MsgType::PoolPlace, std::span(frame).subspan(kHeaderSize)),
                 ProtocolError)
        << bad.members << " " << bad.prev << " " << bad.next << " " << bad.tree_channels;
  }
}

TEST(ControlCodec, MalformedFramesAreRefused) {
  auto frame = encode(Hello{1, 22809, "x"});
  auto bad = frame;
  bad[0] ^= 1;
  expectRefused(bad, "bad magic at offset 0");
  bad = frame;
  bad[4] = 9;
  expectRefused(bad, "protocol version 9 at offset 4");
  bad = frame;
  bad[6] = 200;
  expectRefused(bad, "unknown message type 200 at offset 6");
  bad = frame;
  bad[8] = 0xff;
  bad[9] = 0xff;
  expectRefused(bad, "exceeds 4096");
  expectRefused(std::span(frame).first(5), "header truncated: 5 of 12");
  // Payload one byte short: the hostid text is cut.
  bad = frame;
  bad.pop_back();
  expectRefused(bad, "field 'hostid'");
  // One byte too many.
  bad = encode(Ok{});
  bad.push_back(0);
  expectRefused(bad, "1 trailing bytes");
  // A text length larger than the limit.
  bad = encode(Error{"e"});
  bad[kHeaderSize] = 0xff;
  bad[kHeaderSize + 1] = 0xff;
  expectRefused(bad, "length 65535 exceeds 2048");
}

}  // namespace
}  // namespace crystal::control
