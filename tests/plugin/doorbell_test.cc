// Doorbells (plugin/doorbell.h): a real<->real connection's proxies skip recv() while the
// other side's byte count says nothing is waiting, and still look once a millisecond, so
// bytes written without a count and a peer that closed are noticed.
#include "doorbell.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "real_pair_fixture.h"

namespace crystal::test {
namespace {

TEST(Doorbell, ReaderLooksOnlyWhenTheWritersCountIsAheadOrAMillisecondPassed) {
  std::string why;
  auto sender = plugin::Doorbell::create(&why);
  ASSERT_TRUE(sender) << why;
  EXPECT_TRUE(sender->worthReading()) << "not attached yet: always ask the socket";
  sender->wrote(40);  // bytes before the receiver maps the page
  auto receiver = plugin::Doorbell::open(sender->name(), 0, 0, &why);
  ASSERT_TRUE(receiver) << why;
  EXPECT_TRUE(receiver->worthReading()) << "40 bytes announced, none read";
  receiver->read(40);
  // Counts equal: a look at most once a millisecond, however often it asks.
  auto calls = [&](plugin::Doorbell& d) {
    const auto t0 = std::chrono::steady_clock::now();
    int looks = 0;
    for (int i = 0; i < 100000; ++i) looks += d.worthReading();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LE(looks, 1 + static_cast<int>(ms)) << ms << " ms";
    return looks;
  };
  (void)calls(*receiver);
  sender->wrote(24);
  EXPECT_TRUE(receiver->worthReading());
  receiver->read(24);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(receiver->worthReading()) << "a millisecond passed: look (a dead peer?)";
  // Replies the other way, counted from what the receiver had written before it attached.
  (void)calls(*sender);
  receiver->wrote(16);
  EXPECT_TRUE(sender->worthReading());
  sender->read(16);
  EXPECT_FALSE(plugin::Doorbell::open("/crystal-1-0123456789abcdef", 0, 0, &why));
}

class DoorbellPeer : public RealPairBadPeer {
 protected:
  // The raw sender opens its stream with a doorbell page, as the plugin's sender does.
  void attach() {
    std::string why;
    bell_ = plugin::Doorbell::create(&why);
    ASSERT_TRUE(bell_) << why;
    plugin::FrameHeader h;
    h.kind = plugin::FrameKind::Doorbells;
    plugin::ShmOfferBody body;
    std::snprintf(body.name, sizeof body.name, "%s", bell_->name().c_str());
    write(&h, sizeof h);
    write(&body, sizeof body);
  }
  void write(const void* p, std::size_t n, bool announce = true) {
    peer_.writeAll(p, n);
    if (announce) bell_->wrote(n);
  }
  void dataFrame(const std::string& bytes, bool announce) {
    plugin::FrameHeader h;
    h.tag = 1;
    h.size = bytes.size();
    write(&h, sizeof h, announce);
    write(bytes.data(), bytes.size(), announce);
  }
  std::unique_ptr<plugin::Doorbell> bell_;
};

// Announced bytes are read at once; bytes the count does not cover are found by the look.
TEST_F(DoorbellPeer, AnnouncedAndUnannouncedBytesBothArrive) {
  connectRawSender();
  attach();
  for (const bool announce : {true, false}) {
    SCOPED_TRACE(announce ? "announced" : "not announced");
    dataFrame(announce ? "counted bytes" : "uncounted", announce);
    void* req = recvPost(r_, dst_.at(0), 64);
    ASSERT_EQ(progressAll({req}), 1u);
    EXPECT_EQ(std::string(reinterpret_cast<char*>(dst_.at(0)), announce ? 13 : 9),
              announce ? "counted bytes" : "uncounted");
  }
}

// A peer that closes its end without a word is noticed through the periodic look: an error,
// not a receive that waits for ever.
TEST_F(DoorbellPeer, ClosedPeerIsAnErrorDespiteAnIdleCount) {
  connectRawSender();
  attach();
  dataFrame("first", true);
  void* req = recvPost(r_, dst_.at(0), 64);
  ASSERT_EQ(progressAll({req}), 1u);
  ::close(peer_.fd);
  peer_.fd = -1;
  expectRemoteError("closed");
}

}  // namespace
}  // namespace crystal::test
