// The shared-memory stream (plugin/shm_stream.h): a real<->real connection's frames and replies
// leave the socket once both sides hold the page, in order across the move; a dead or closed
// peer is still noticed through the socket, and a peer that breaks the page's rules is an error.
#include "shm_stream.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "errors.h"
#include "real_pair_fixture.h"

namespace crystal::test {
namespace {

using plugin::ShmStream;
using plugin::StreamPage;

// A connected pair of non-blocking stream sockets: [0] the sender's, [1] the receiver's.
struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fd), 0); }
  ~SocketPair() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  [[nodiscard]] std::size_t pending(int side) const {  // bytes waiting for `side`
    char buf[256];
    const ssize_t n = ::recv(fd[side], buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 ? static_cast<std::size_t>(n) : 0;
  }
};

// A page and both ends of it, the receiver's mapped before anything was written.
void attachedPair(std::unique_ptr<ShmStream>& sender, std::unique_ptr<ShmStream>& receiver) {
  std::string why;
  sender = ShmStream::create(&why);
  ASSERT_TRUE(sender) << why;
  receiver = ShmStream::open(sender->name(), 0, 0, &why);
  ASSERT_TRUE(receiver) << why;
}

std::string readAll(ShmStream& s, int fd, std::size_t n) {
  std::string out(n, '\0');
  std::size_t got = 0;
  for (int i = 0; i < 100000 && got < n; ++i) got += s.read(fd, out.data() + got, n - got);
  out.resize(got);
  return out;
}

std::size_t writeAll(ShmStream& s, int fd, const std::string& bytes) {
  std::size_t put = 0;
  for (int i = 0; i < 100000 && put < bytes.size(); ++i)
    put += s.write(fd, bytes.data() + put, bytes.size() - put);
  return put;
}

// The sender's bytes before the receiver maps the page go on the socket, those after into the
// ring; the receiver reads them in order, a message that straddles the move whole.
TEST(ShmStream, BytesKeepTheirOrderAcrossTheMove) {
  SocketPair sp;
  std::string why;
  auto sender = ShmStream::create(&why);
  ASSERT_TRUE(sender) << why;
  ASSERT_EQ(writeAll(*sender, sp.fd[0], "before-"), 7u);
  EXPECT_EQ(sp.pending(1), 7u) << "not attached: the socket";
  EXPECT_FALSE(sender->moved());
  // The receiver read the first 3 bytes (the page's frame, say) before it mapped the page.
  char head[3];
  ASSERT_EQ(::recv(sp.fd[1], head, 3, 0), 3);
  auto receiver = ShmStream::open(sender->name(), 3, 0, &why);
  ASSERT_TRUE(receiver) << why;
  ASSERT_EQ(writeAll(*sender, sp.fd[0], "after"), 5u);
  EXPECT_EQ(sp.pending(1), 4u) << "after the move nothing more on the socket";
  EXPECT_TRUE(sender->moved());
  EXPECT_TRUE(receiver->moved());
  EXPECT_EQ(readAll(*receiver, sp.fd[1], 9), "ore-after");
  // Replies: into the ring from the moment the receiver mapped the page.
  ASSERT_EQ(writeAll(*receiver, sp.fd[1], "ack"), 3u);
  EXPECT_EQ(sp.pending(0), 0u);
  EXPECT_EQ(readAll(*sender, sp.fd[0], 3), "ack");
}

// The ring wraps and fills: a writer with no room takes nothing, and everything arrives in
// order once the reader drains it.
TEST(ShmStream, RingWrapsAndFillsWithoutLosingABytes) {
  SocketPair sp;
  std::unique_ptr<ShmStream> sender, receiver;
  ASSERT_NO_FATAL_FAILURE(attachedPair(sender, receiver));
  std::string data(3 * StreamPage::kRing + 123, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + i / 7);
  EXPECT_EQ(sender->write(sp.fd[0], data.data(), data.size()), StreamPage::kRing) << "full ring";
  EXPECT_EQ(sender->write(sp.fd[0], data.data(), 1), 0u);
  std::string got = readAll(*receiver, sp.fd[1], 1000);
  std::size_t put = StreamPage::kRing;
  // Odd chunks both ways, so both sides cross the ring's end at every offset class.
  for (int i = 0; i < 100000 && got.size() < data.size(); ++i) {
    put +=
        sender->write(sp.fd[0], data.data() + put, std::min<std::size_t>(data.size() - put, 7777));
    std::string part(std::min<std::size_t>(data.size() - got.size(), 5003), '\0');
    part.resize(receiver->read(sp.fd[1], part.data(), part.size()));
    got += part;
  }
  ASSERT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(sp.pending(1), 0u);
}

// Both directions at once from two threads, as two proxies run them.
TEST(ShmStream, TwoThreadsStreamBothWays) {
  SocketPair sp;
  std::unique_ptr<ShmStream> sender, receiver;
  ASSERT_NO_FATAL_FAILURE(attachedPair(sender, receiver));
  constexpr std::size_t kN = 4 << 20;
  std::vector<std::uint32_t> words(kN / 4);
  std::iota(words.begin(), words.end(), 1u);
  std::vector<std::uint32_t> got_r(words.size()), got_s(words.size());
  auto run = [&](ShmStream& s, int fd, std::vector<std::uint32_t>& got) {
    const auto* out = reinterpret_cast<const char*>(words.data());
    auto* in = reinterpret_cast<char*>(got.data());
    std::size_t put = 0, read = 0;
    const auto end = Clock::now() + std::chrono::seconds(30);
    while ((put < kN || read < kN) && Clock::now() < end) {
      if (put < kN) put += s.write(fd, out + put, std::min<std::size_t>(kN - put, 4097));
      if (read < kN) read += s.read(fd, in + read, std::min<std::size_t>(kN - read, 3001));
    }
  };
  std::thread t([&] { run(*receiver, sp.fd[1], got_r); });
  run(*sender, sp.fd[0], got_s);
  t.join();
  EXPECT_TRUE(got_r == words);
  EXPECT_TRUE(got_s == words);
}

// After the move the socket is idle, yet a peer that closed it is noticed within a look.
TEST(ShmStream, ClosedPeerIsNoticedThroughTheSocket) {
  SocketPair sp;
  std::unique_ptr<ShmStream> sender, receiver;
  ASSERT_NO_FATAL_FAILURE(attachedPair(sender, receiver));
  ASSERT_EQ(writeAll(*sender, sp.fd[0], "x"), 1u);
  ASSERT_EQ(readAll(*receiver, sp.fd[1], 1), "x");
  ::close(sp.fd[0]);
  sp.fd[0] = -1;
  char c = 0;
  const auto t0 = Clock::now();
  std::string error;
  while (error.empty() && Clock::now() - t0 < std::chrono::seconds(5)) {
    try {
      EXPECT_EQ(receiver->read(sp.fd[1], &c, 1), 0u);
    } catch (const plugin::PluginError& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("closed"), std::string::npos) << error;
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500));
}

// A writer whose ring stays full still notices the reader's end of the socket.
TEST(ShmStream, FullRingWithADeadReaderIsAnError) {
  SocketPair sp;
  std::unique_ptr<ShmStream> sender, receiver;
  ASSERT_NO_FATAL_FAILURE(attachedPair(sender, receiver));
  std::string fill(StreamPage::kRing, 'f');
  ASSERT_EQ(writeAll(*sender, sp.fd[0], fill), fill.size());
  receiver.reset();
  ::close(sp.fd[1]);
  sp.fd[1] = -1;
  bool failed = false;
  const auto t0 = Clock::now();
  while (!failed && Clock::now() - t0 < std::chrono::seconds(5)) {
    try {
      EXPECT_EQ(sender->write(sp.fd[0], "y", 1), 0u);
    } catch (const plugin::PluginError&) {
      failed = true;
    }
  }
  EXPECT_TRUE(failed);
}

// Rules of the page: no socket bytes after the move, no head past the ring, a real page only.
TEST(ShmStream, PeerBreakingThePageIsAnError) {
  SocketPair sp;
  std::string why;
  std::unique_ptr<ShmStream> sender, receiver;
  ASSERT_NO_FATAL_FAILURE(attachedPair(sender, receiver));
  ASSERT_EQ(writeAll(*sender, sp.fd[0], "moved"), 5u);
  ASSERT_EQ(::send(sp.fd[0], "!", 1, 0), 1);  // behind the page's back
  ASSERT_EQ(readAll(*receiver, sp.fd[1], 5), "moved");
  char c = 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a look is due
  try {
    (void)receiver->read(sp.fd[1], &c, 1);
    ADD_FAILURE() << "a socket byte after the move was taken";
  } catch (const plugin::PluginError& e) {
    EXPECT_NE(std::string(e.what()).find("after its stream moved"), std::string::npos) << e.what();
  }
  // A page whose writer claims more bytes than the ring holds (a page made by hand).
  SocketPair sp2;
  auto made = plugin::ShmSegment::create(4096 + 2 * StreamPage::kRing, &why);
  ASSERT_TRUE(made) << why;
  auto* page = new (made->data()) StreamPage;
  page->frames.moved.store(1);
  page->frames.head.store(3 * StreamPage::kRing);
  auto r2 = ShmStream::open(made->name(), 0, 0, &why);
  ASSERT_TRUE(r2) << why;
  try {
    (void)r2->read(sp2.fd[1], &c, 1);
    ADD_FAILURE() << "an overrun ring was read";
  } catch (const plugin::PluginError& e) {
    EXPECT_NE(std::string(e.what()).find("ring overrun"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ShmStream::open("/crystal-1-0123456789abcdef", 0, 0, &why));
  auto other = plugin::ShmSegment::create(4096 + 2 * StreamPage::kRing, &why);
  ASSERT_TRUE(other) << why;
  EXPECT_FALSE(ShmStream::open(other->name(), 0, 0, &why)) << "zero page: no magic";
  EXPECT_EQ(why, "not a stream page");
}

// The plugin's receiver against a raw sender that opens its stream with a page, as the
// plugin's sender does: frames through the ring arrive; a sender that closes is an error.
class StreamPeer : public RealPairBadPeer {
 protected:
  void attach() {
    std::string why;
    stream_ = ShmStream::create(&why);
    ASSERT_TRUE(stream_) << why;
    plugin::FrameHeader h;
    h.kind = plugin::FrameKind::StreamPage;
    plugin::ShmOfferBody body;
    std::snprintf(body.name, sizeof body.name, "%s", stream_->name().c_str());
    write(&h, sizeof h);
    write(&body, sizeof body);
  }
  void write(const void* p, std::size_t n) {
    std::size_t put = 0;
    for (int i = 0; i < 1'000'000 && put < n; ++i)
      put += stream_->write(peer_.fd, static_cast<const char*>(p) + put, n - put);
    ASSERT_EQ(put, n);
  }
  void dataFrame(const std::string& bytes) {
    plugin::FrameHeader h;
    h.tag = 1;
    h.size = bytes.size();
    write(&h, sizeof h);
    write(bytes.data(), bytes.size());
  }
  std::unique_ptr<ShmStream> stream_;
};

TEST_F(StreamPeer, FramesThroughThePageArriveAndNothingMoreUsesTheSocket) {
  connectRawSender();
  attach();
  for (const char* text : {"first frame", "second"}) {
    dataFrame(text);
    void* req = recvPost(r_, dst_.at(0), 64);
    ASSERT_EQ(progressAll({req}), 1u);
    EXPECT_EQ(std::string(reinterpret_cast<char*>(dst_.at(0)), std::strlen(text)), text);
  }
  EXPECT_TRUE(stream_->moved()) << "the plugin mapped the page, the second frame used it";
  // Only the hello, the page's frame and the first frame went over TCP (all read already).
  char c = 0;
  EXPECT_EQ(::recv(peer_.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT), -1);
}

TEST_F(StreamPeer, ClosedPeerIsAnErrorThoughTheRingIsIdle) {
  connectRawSender();
  attach();
  dataFrame("first");
  void* req = recvPost(r_, dst_.at(0), 64);
  ASSERT_EQ(progressAll({req}), 1u);
  ::close(peer_.fd);
  peer_.fd = -1;
  expectRemoteError("closed");
}

}  // namespace
}  // namespace crystal::test
