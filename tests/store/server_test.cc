// The store over real TCP: a test client sends byte sequences exactly as PyTorch 2.11's
// TCPStore client does and checks the exact reply bytes; bad input closes only the
// offending connection; an unanswerable WAIT ends with a closed connection in time.
#include "crystal/store/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "wire.h"

namespace crystal::store {
namespace {

using namespace std::chrono_literals;

class TestClient {
 public:
  explicit TestClient(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
      ADD_FAILURE() << "connect";
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~TestClient() { ::close(fd_); }
  void send(const std::string& b) {
    ASSERT_EQ(::send(fd_, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
  }
  // Exactly n bytes, or fewer if the server closed / nothing came within `within`.
  std::string recv(std::size_t n, std::chrono::milliseconds within = 2000ms) {
    std::string out;
    const auto end = std::chrono::steady_clock::now() + within;
    while (out.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[4096];
      const ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) {
        closed_ = true;
        break;
      }
      out.append(buf, static_cast<std::size_t>(got));
    }
    return out;
  }
  // True once the server has closed the connection (EOF within `within`).
  bool closedBy(std::chrono::milliseconds within) {
    recv(1, within);
    return closed_;
  }
  void handshake(std::uint32_t pid) {
    send(client::validate() + client::ping(pid));
    EXPECT_EQ(recv(4), std::string(reinterpret_cast<const char*>(&pid), 4));
  }

 private:
  int fd_ = -1;
  bool closed_ = false;
};

std::string i64(std::int64_t v) {
  std::string s;
  putI64(s, v);
  return s;
}

StoreServerOptions options(int world, std::vector<int> real) {
  StoreServerOptions o;
  o.world_size = world;
  o.real_ranks = std::move(real);
  o.wait_timeout = 3000ms;
  o.mint_unique_id = [] { return std::string(128, 'M'); };
  return o;
}

TEST(StoreServer, ServesRankZeroOfSixtyFour) {
  StoreServer s(options(64, {0}));
  EXPECT_EQ(s.host(), "127.0.0.1");
  TestClient c(s.port());
  c.handshake(1234);
  c.send(client::add("init/", 1));
  EXPECT_EQ(c.recv(8), i64(64));
  c.send(client::set("/default_pg/0//cuda//0", std::string(128, 'R')));
  c.send(client::check({"/exception_dump"}));
  EXPECT_EQ(c.recv(1), std::string(1, '\x01'));
  // Lazy subgroup whose first member is virtual: the only real process waits, so it is minted.
  c.send(client::wait({"/default_pg/0//1//cuda//0"}));
  EXPECT_EQ(c.recv(1), std::string(1, '\0'));
  c.send(client::get("/default_pg/0//1//cuda//0"));
  std::string expect;
  putBytes(expect, std::string(128, 'M'));
  EXPECT_EQ(c.recv(expect.size()), expect);
  EXPECT_EQ(s.errorCount(), 0u);
}

TEST(StoreServer, RequestsSplitAcrossSegmentsAndPipelined) {
  StoreServer s(options(4, {0, 1}));
  TestClient c(s.port());
  const std::string all =
      client::validate() + client::ping(7) + client::add("n", 2) + client::add("n", 3);
  for (char ch : all) {  // one byte per segment
    c.send(std::string(1, ch));
    std::this_thread::sleep_for(1ms);
  }
  std::string seven(4, '\0');
  seven[0] = 7;
  EXPECT_EQ(c.recv(4 + 16), seven + i64(2) + i64(5));
}

TEST(StoreServer, DeferredWaitIsAnsweredWhenAnotherRankSets) {
  StoreServer s(options(64, {0, 32}));
  TestClient r0(s.port()), r32(s.port());
  r0.handshake(100);
  r32.handshake(132);
  r32.send(client::wait({"/default_pg/0//cuda//0"}));
  EXPECT_EQ(r32.recv(1, 200ms), "");  // rank 0 is real: nothing yet
  r0.send(client::set("/default_pg/0//cuda//0", std::string(128, 'R')));
  EXPECT_EQ(r32.recv(1), std::string(1, '\0'));
}

TEST(StoreServer, ASetJustBeforeTheWriterExitsStillCounts) {
  StoreServer s(options(64, {0, 32}));
  TestClient r32(s.port());
  r32.handshake(132);
  r32.send(client::wait({"/default_pg/0//cuda//0"}));
  for (int i = 0; i < 20; ++i) {  // the SET and the FIN arrive together
    auto r0 = std::make_unique<TestClient>(s.port());
    r0->send(client::validate() + client::ping(100) +
             client::set("/default_pg/0//cuda//x" + std::to_string(i), "v"));
  }
  {
    TestClient r0(s.port());
    r0.send(client::validate() + client::ping(100) +
            client::set("/default_pg/0//cuda//0", std::string(128, 'R')));
  }
  EXPECT_EQ(r32.recv(1), std::string(1, '\0'));
}

TEST(StoreServer, GarbageClosesOnlyThatConnection) {
  StoreServer s(options(4, {0, 1}));
  TestClient good(s.port()), bad(s.port());
  good.handshake(1);
  bad.handshake(2);
  bad.send(std::string("\x7f\x01\x02", 3));
  EXPECT_TRUE(bad.closedBy(2000ms));
  good.send(client::add("k", 1));
  EXPECT_EQ(good.recv(8), i64(1));
  ASSERT_EQ(s.errorCount(), 1u);
  EXPECT_NE(s.errors()[0].find("unknown TCPStore command byte 127"), std::string::npos)
      << s.errors()[0];
}

TEST(StoreServer, UnansweredWaitClosesWithinTheTimeout) {
  auto o = options(64, {0, 32});
  o.wait_timeout = 500ms;
  StoreServer s(o);
  s.nameProcess(132, 32);
  TestClient c(s.port());
  c.handshake(132);
  const auto t0 = std::chrono::steady_clock::now();
  c.send(client::wait({"/unknown"}));
  EXPECT_TRUE(c.closedBy(3000ms));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 450ms);
  EXPECT_LT(took, 2500ms);
  ASSERT_EQ(s.errorCount(), 1u);
  EXPECT_NE(s.errors()[0].find("rank 32 (pid 132): waited"), std::string::npos) << s.errors()[0];
}

TEST(StoreServer, BadAddressIsAnInputError) {
  auto o = options(4, {0});
  o.listen = "not-an-address";
  EXPECT_ANY_THROW(StoreServer{o});
}

}  // namespace
}  // namespace crystal::store
