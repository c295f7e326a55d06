// The store's replies to hand-built request sequences of real ranks, in the order PyTorch
// 2.11 sends them (docs/store.md §Sequences): init_process_group, the default group's id,
// lazy subgroups, the store-based barrier; and refusals of what no 2.11 client sends.
#include "store_core.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

namespace crystal::store {
namespace {

using namespace std::chrono_literals;

std::string u8(std::uint8_t v) { return std::string(1, static_cast<char>(v)); }
std::string i64(std::int64_t v) {
  std::string s;
  putI64(s, v);
  return s;
}
std::string bytes(std::string_view v) {
  std::string s;
  putBytes(s, v);
  return s;
}

class Harness {
 public:
  explicit Harness(JobView job, std::chrono::milliseconds timeout = 1000ms)
      : core_(
            VirtualRanks(std::move(job)), [this] { return mint(); }, CoreOptions{timeout}) {}

  // Opens a connection and runs PyTorch's handshake (VALIDATE, PING with the pid).
  ConnId connect(std::uint32_t pid) {
    const ConnId id = next_++;
    core_.open(id, now_);
    EXPECT_EQ(send(id, client::validate()), "");
    EXPECT_EQ(send(id, client::ping(pid)), std::string(reinterpret_cast<const char*>(&pid), 4));
    return id;
  }
  // Sends one request; returns what the store replied on this connection (effects on other
  // connections go to replies_to()).
  std::string send(ConnId id, const std::string& msg) {
    const ParseResult p = parseRequest(std::as_bytes(std::span(msg.data(), msg.size())));
    EXPECT_EQ(p.status, ParseStatus::Complete);
    Effects fx;
    core_.request(id, p.request, now_, fx);
    return take(fx, id);
  }
  std::string take(Effects& fx, ConnId id) {
    std::string mine;
    for (auto& [to, b] : fx.replies) (to == id ? mine : others_[to]) += b;
    for (auto& e : fx.errors) errors_.push_back(e);
    for (auto& n : fx.notes) notes_.push_back(n);
    for (ConnId c : fx.closes) closed_.push_back(c);
    fx = {};
    return mine;
  }
  std::string repliesTo(ConnId id) { return std::exchange(others_[id], ""); }
  void advance(std::chrono::milliseconds d) {
    now_ += d;
    Effects fx;
    core_.tick(now_, fx);
    take(fx, 0);
  }
  StoreCore& core() { return core_; }
  std::vector<std::string> errors_, notes_, minted_;
  std::vector<ConnId> closed_;

 private:
  std::string mint() {
    std::string id(128, '\0');
    const std::string tag = "id" + std::to_string(minted_.size());
    std::memcpy(id.data(), tag.data(), tag.size());
    minted_.push_back(id);
    return id;
  }
  StoreCore core_;
  Clock::time_point now_{};
  ConnId next_ = 1;
  std::map<ConnId, std::string> others_;
};

const std::string kWorldId = "/default_pg/0//cuda//0";
const std::string kDump = "/exception_dump";

// init_process_group(backend="nccl", device_id=...) of rank 0 in a 64-rank job, rank 0 the
// only real rank, then new_group (lazy: first collective) and the heartbeat's CHECK.
TEST(StoreCore, RankZeroOfSixtyFourInitsWithoutItsPeers) {
  Harness h({.world_size = 64, .real_ranks = {0}});
  const ConnId c = h.connect(1000);
  // waitForWorkers: ADD "init/" 1 -> the 63 virtual check-ins are already there.
  EXPECT_EQ(h.send(c, client::add("init/", 1)), i64(64));
  // Rank 0 writes the id it got from ncclGetUniqueId (the interposer's minted one).
  const std::string id(128, 'R');
  EXPECT_EQ(h.send(c, client::set(kWorldId, id)), "");
  // Heartbeat monitor: exception_dump must never exist.
  EXPECT_EQ(h.send(c, client::check({kDump})), u8(kCheckNotReady));
  // Lazy new_group "1": rank 0 is the group's first member and writes; nothing minted.
  EXPECT_EQ(h.send(c, client::set("/default_pg/0//1//cuda//0", std::string(128, 'S'))), "");
  EXPECT_TRUE(h.minted_.empty());
  EXPECT_EQ(h.send(c, client::getNumKeys()), i64(3));
  EXPECT_TRUE(h.errors_.empty());
}

TEST(StoreCore, VirtualRankZeroWritesTheWorldId) {
  Harness h({.world_size = 64, .real_ranks = {5}});
  const ConnId c = h.connect(1005);
  EXPECT_EQ(h.send(c, client::add("init/", 1)), i64(64));
  // TCPStore::get = WAIT then GET; the virtual rank 0 writes at once.
  EXPECT_EQ(h.send(c, client::wait({kWorldId})), u8(kStopWaiting));
  ASSERT_EQ(h.minted_.size(), 1u);
  EXPECT_EQ(h.send(c, client::get(kWorldId)), bytes(h.minted_[0]));
  ASSERT_EQ(h.notes_.size(), 1u);
  EXPECT_NE(h.notes_[0].find("virtual rank 0 wrote ncclUniqueId of the default process group"),
            std::string::npos)
      << h.notes_[0];
  // A later waiter gets the same id.
  const ConnId d = h.connect(1005);
  EXPECT_EQ(h.send(d, client::wait({kWorldId})), u8(kStopWaiting));
  EXPECT_EQ(h.send(d, client::get(kWorldId)), bytes(h.minted_[0]));
  EXPECT_EQ(h.minted_.size(), 1u);
}

TEST(StoreCore, RealRankZeroIsWaitedFor) {
  Harness h({.world_size = 64, .real_ranks = {0, 32}});
  const ConnId r0 = h.connect(100), r32 = h.connect(132);
  EXPECT_EQ(h.send(r32, client::add("init/", 1)), i64(63));
  EXPECT_EQ(h.send(r32, client::wait({kWorldId})), "");  // deferred: rank 0 is real
  EXPECT_EQ(h.core().waitingConnections(), 1u);
  EXPECT_EQ(h.send(r0, client::add("init/", 1)), i64(64));
  EXPECT_EQ(h.send(r0, client::set(kWorldId, std::string(128, 'R'))), "");
  EXPECT_EQ(h.repliesTo(r32), u8(kStopWaiting));
  EXPECT_EQ(h.send(r32, client::get(kWorldId)), bytes(std::string(128, 'R')));
  EXPECT_TRUE(h.minted_.empty());
}

TEST(StoreCore, ScalableInitMintsOnlyTheVirtualRoots) {
  Harness h({.world_size = 512, .real_ranks = {0, 256}});
  const ConnId a = h.connect(1), b = h.connect(2);
  std::vector<std::string> keys;
  for (int i = 0; i < 4; ++i)
    keys.push_back(kWorldId.substr(0, kWorldId.size() - 1) + "UniqueNCCLID:" + std::to_string(i));
  // Roots 0 and 2 (ranks 0, 256) are real and write theirs; 1 and 3 are virtual.
  EXPECT_EQ(h.send(a, client::set(keys[0], std::string(128, 'A'))), "");
  EXPECT_EQ(h.send(a, client::wait(keys)), "");  // root 2 (real) has not written yet
  EXPECT_EQ(h.minted_.size(), 2u);
  EXPECT_EQ(h.send(b, client::set(keys[2], std::string(128, 'B'))), "");
  EXPECT_EQ(h.repliesTo(a), u8(kStopWaiting));
  EXPECT_EQ(h.send(b, client::wait(keys)), u8(kStopWaiting));
  EXPECT_EQ(h.send(b, client::multiGet(keys)), bytes(std::string(128, 'A')) + bytes(h.minted_[0]) +
                                                   bytes(std::string(128, 'B')) +
                                                   bytes(h.minted_[1]));
}

TEST(StoreCore, SubgroupIdIsMintedOnlyOnceEveryRealProcessWaits) {
  Harness h({.world_size = 64, .real_ranks = {8, 40}});
  const std::string key = "/default_pg/0//2//cuda//0";
  const ConnId a = h.connect(8), b = h.connect(40);
  EXPECT_EQ(h.send(a, client::wait({key})), "");
  EXPECT_TRUE(h.minted_.empty());  // rank 40 might still be the writer
  EXPECT_EQ(h.send(b, client::wait({key})), u8(kStopWaiting));
  ASSERT_EQ(h.minted_.size(), 1u);
  EXPECT_EQ(h.repliesTo(a), u8(kStopWaiting));
}

TEST(StoreCore, ClonedConnectionsOfOneProcessCountOnce) {
  Harness h({.world_size = 64, .real_ranks = {8, 40}});
  const std::string key = "/default_pg/0//2//cuda//0";
  const ConnId a = h.connect(8), a2 = h.connect(8);
  EXPECT_EQ(h.send(a, client::wait({key})), "");
  EXPECT_EQ(h.send(a2, client::wait({key})), "");
  EXPECT_TRUE(h.minted_.empty());
}

TEST(StoreCore, WorldBarrierCountsTheVirtualRanks) {
  Harness h({.world_size = 64, .real_ranks = {0}});
  const ConnId c = h.connect(1);
  const std::string key = "/default_pg/store_based_barrier_key:0";
  EXPECT_EQ(h.send(c, client::add(key, 1)), i64(64));
  EXPECT_EQ(h.send(c, client::add(key, 0)), i64(64));
  EXPECT_EQ(h.send(c, client::set(key + ":last_worker", "1")), "");
  EXPECT_EQ(h.send(c, client::wait({key + ":last_worker"})), u8(kStopWaiting));
}

TEST(StoreCore, SubgroupBarrierIsReleasedWhenEveryRealMemberWaits) {
  Harness h({.world_size = 64, .real_ranks = {0}});
  const ConnId c = h.connect(1);
  const std::string key = "/default_pg/0//store_based_barrier_key:1";
  EXPECT_EQ(h.send(c, client::add(key, 1)), i64(1));
  EXPECT_EQ(h.send(c, client::wait({key + ":last_worker"})), u8(kStopWaiting));
  EXPECT_EQ(h.core().value(key + ":last_worker"), "1");
}

TEST(StoreCore, UnansweredWaitFailsAfterTheTimeoutNamingKeyAndRank) {
  Harness h({.world_size = 64, .real_ranks = {0, 32}}, 2000ms);
  h.core().nameProcess(132, 32);
  const ConnId c = h.connect(132);
  EXPECT_EQ(h.send(c, client::wait({"/my_script/key"})), "");
  h.advance(1999ms);
  EXPECT_TRUE(h.closed_.empty());
  h.advance(1ms);
  ASSERT_EQ(h.closed_, std::vector<ConnId>{c});
  ASSERT_EQ(h.errors_.size(), 1u);
  EXPECT_NE(h.errors_[0].find("rank 32 (pid 132): waited 2 s for '/my_script/key' (no virtual "
                              "rank of PyTorch 2.11 writes this key"),
            std::string::npos)
      << h.errors_[0];
  EXPECT_EQ(h.core().waitingConnections(), 0u);
}

TEST(StoreCore, CancelWaitEndsTheWait) {
  Harness h({.world_size = 4, .real_ranks = {0, 1}});
  const ConnId c = h.connect(1);
  EXPECT_EQ(h.send(c, client::wait({"k"})), "");
  EXPECT_EQ(h.send(c, client::cancelWait()), u8(kWaitCanceled));
  EXPECT_EQ(h.core().waitingConnections(), 0u);
  const ConnId d = h.connect(2);
  EXPECT_EQ(h.send(d, client::set("k", "v")), "");
  EXPECT_EQ(h.repliesTo(c), "");  // no late STOP_WAITING on a cancelled wait
}

TEST(StoreCore, KeyValueCommandsFollowTheLibuvServer) {
  Harness h({.world_size = 4, .real_ranks = {0, 1, 2, 3}});
  const ConnId c = h.connect(1);
  EXPECT_EQ(h.send(c, client::get("missing")), bytes(""));
  // COMPARE_SET: missing key + empty expected creates; missing + non-empty returns expected.
  EXPECT_EQ(h.send(c, client::compareSet("cas", "x", "y")), bytes("x"));
  EXPECT_FALSE(h.core().value("cas").has_value());
  EXPECT_EQ(h.send(c, client::compareSet("cas", "", "a")), bytes("a"));
  EXPECT_EQ(h.send(c, client::compareSet("cas", "zz", "b")), bytes("a"));
  EXPECT_EQ(h.send(c, client::compareSet("cas", "a", "b")), bytes("b"));
  EXPECT_EQ(h.send(c, client::add("n", 5)), i64(5));
  EXPECT_EQ(h.send(c, client::add("n", -2)), i64(3));
  EXPECT_EQ(h.core().value("n"), "3");
  EXPECT_EQ(h.send(c, client::append("ap", "ab")), "");
  EXPECT_EQ(h.send(c, client::append("ap", "cd")), "");
  EXPECT_EQ(h.send(c, client::multiSet({{"m1", "1"}, {"m2", "2"}})), "");
  EXPECT_EQ(h.send(c, client::multiGet({"ap", "m2", "nope"})),
            bytes("abcd") + bytes("2") + bytes(""));
  EXPECT_EQ(h.send(c, client::check({"m1", "m2"})), u8(kCheckReady));
  EXPECT_EQ(h.send(c, client::deleteKey("m1")), i64(1));
  EXPECT_EQ(h.send(c, client::deleteKey("m1")), i64(0));
  EXPECT_EQ(h.send(c, client::listKeys()),
            i64(5) + bytes("ap") + bytes("cas") + bytes("init/") + bytes("m2") + bytes("n"));
}

TEST(StoreCore, QueuesPushPopAndWakeOneWaiter) {
  Harness h({.world_size = 4, .real_ranks = {0, 1}});
  const ConnId a = h.connect(1), b = h.connect(2), p = h.connect(1);
  EXPECT_EQ(h.send(a, client::wait({"q"})), "");
  EXPECT_EQ(h.send(b, client::wait({"q"})), "");
  EXPECT_EQ(h.send(p, client::queuePush("q", "v1")), "");
  EXPECT_EQ(h.repliesTo(a), u8(kStopWaiting));
  EXPECT_EQ(h.repliesTo(b), "");
  EXPECT_EQ(h.send(p, client::queueLen("q")), i64(1));
  EXPECT_EQ(h.send(a, client::queuePop("q")), i64(1) + bytes("v1"));
  EXPECT_EQ(h.send(a, client::queuePop("q")), i64(0));
}

TEST(StoreCore, ProtocolViolationsCloseTheConnectionWithAReason) {
  Harness h({.world_size = 4, .real_ranks = {0}});
  Effects fx;
  h.core().open(50, {});
  const auto first = client::getNumKeys();
  h.core().request(50, parseRequest(std::as_bytes(std::span(first))).request, {}, fx);
  h.take(fx, 50);
  h.core().open(51, {});
  const auto bad = client::validate(0x12345678);
  h.core().request(51, parseRequest(std::as_bytes(std::span(bad))).request, {}, fx);
  h.take(fx, 51);
  ASSERT_EQ(h.errors_.size(), 2u);
  EXPECT_NE(h.errors_[0].find("first TCPStore command GETNUMKEYS is not VALIDATE"),
            std::string::npos);
  EXPECT_NE(h.errors_[1].find("VALIDATE magic 0x12345678"), std::string::npos) << h.errors_[1];
  const ConnId c = h.connect(9);
  EXPECT_EQ(h.send(c, client::set("s", "abc")), "");
  EXPECT_EQ(h.send(c, client::add("s", 1)), "");
  EXPECT_NE(h.errors_.back().find("ADD on 's', whose value is not a decimal integer"),
            std::string::npos);
  const ConnId d = h.connect(9);
  EXPECT_EQ(h.send(d, client::wait({"never"})), "");
  EXPECT_EQ(h.send(d, client::get("never")), "");
  EXPECT_NE(h.errors_.back().find("GET while a WAIT for 'never' is pending"), std::string::npos);
  EXPECT_EQ(h.closed_, (std::vector<ConnId>{50, 51, c, d}));
}

TEST(StoreCore, RealRankOverwritingAMintedIdIsReported) {
  Harness h({.world_size = 8, .real_ranks = {3}});
  const ConnId c = h.connect(3);
  EXPECT_EQ(h.send(c, client::wait({kWorldId})), u8(kStopWaiting));
  EXPECT_EQ(h.send(c, client::set(kWorldId, "other")), "");
  ASSERT_EQ(h.errors_.size(), 1u);
  EXPECT_NE(h.errors_[0].find("overwrote '/default_pg/0//cuda//0'"), std::string::npos);
}

}  // namespace
}  // namespace crystal::store
