// The interposer's client against hosts that fail: absent at start, killed mid-call, silent.
// Each must give a ProtocolError within the timeout, never a hang.
#include "plugin/interpose/control_client.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "crystal/control/codec.h"
#include "crystal/control/socket_io.h"

namespace crystal::control {
namespace {

using interpose::ControlClient;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A listener on an ephemeral loopback port.
struct Listener {
  Fd fd{::socket(AF_INET, SOCK_STREAM, 0)};
  std::string address;
  Listener() {
    sockaddr_in sa = parseHostPort("127.0.0.1:0", "test");
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(::listen(fd.get(), 4), 0);
    socklen_t len = sizeof sa;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
    address = formatAddress(sa);
  }
};

// Reads one request frame from `fd`.
void readRequest(int fd) {
  const Deadline dl(5.0);
  std::uint8_t head[kHeaderSize];
  recvAll(fd, head, dl);
  std::vector<std::uint8_t> payload(decodeHeader(head).length);
  recvAll(fd, payload, dl);
}

const Hello kHello{1, kSupportedNcclVersion, ""};

TEST(ControlClient, HostAbsentFailsWithinTheTimeout) {
  std::string address;
  {
    Listener l;  // bound then closed: nobody listens there any more
    address = l.address;
  }
  const auto t0 = Clock::now();
  try {
    ControlClient c(address, 0.4, kHello);
    FAIL();
  } catch (const ProtocolError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("cannot reach the emulation host at CRYSTAL_HOST=" + address),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("Connection refused"), std::string::npos) << text;
  }
  const double s = secondsSince(t0);
  EXPECT_GE(s, 0.35);  // it kept retrying: the host may have been starting
  EXPECT_LT(s, 1.0);
}

TEST(ControlClient, HostKilledMidCallGivesAnError) {
  Listener l;
  std::thread host([&] {
    Fd conn(::accept(l.fd.get(), nullptr, nullptr));
    readRequest(conn.get());
    sendAll(conn.get(), encode(HelloOk{}), Deadline(5.0));
    readRequest(conn.get());  // the COMM_INIT ... and the host dies before answering
  });
  ControlClient c(l.address, 5.0, kHello);
  const auto t0 = Clock::now();
  try {
    c.commInit(CommInit{});
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_EQ(std::string(e.what()), "COMM_INIT to the emulation host at " + l.address +
                                         " failed: peer closed the connection");
  }
  EXPECT_LT(secondsSince(t0), 1.0);
  host.join();
  // The client dropped the dead stream.
  EXPECT_THROW((void)c.getUniqueId(), ProtocolError);
}

TEST(ControlClient, SilentHostTimesOut) {
  Listener l;
  Fd conn;
  std::thread host([&] {
    conn = Fd(::accept(l.fd.get(), nullptr, nullptr));
    readRequest(conn.get());
    sendAll(conn.get(), encode(HelloOk{}), Deadline(5.0));
  });
  ControlClient c(l.address, 0.3, kHello);
  host.join();
  const auto t0 = Clock::now();
  try {
    (void)c.getUniqueId();
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("timed out waiting for the peer's reply"),
              std::string::npos);
  }
  const double s = secondsSince(t0);
  EXPECT_GE(s, 0.25);
  EXPECT_LT(s, 1.0);
}

TEST(ControlClient, GarbageReplyIsAnError) {
  Listener l;
  std::thread host([&] {
    Fd conn(::accept(l.fd.get(), nullptr, nullptr));
    readRequest(conn.get());
    const std::vector<std::uint8_t> junk(kHeaderSize, 0x41);
    sendAll(conn.get(), junk, Deadline(5.0));
  });
  try {
    ControlClient c(l.address, 2.0, kHello);
    FAIL();
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("HELLO to the emulation host"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bad magic"), std::string::npos);
  }
  host.join();
}

TEST(ControlClient, MalformedAddressIsAnInputError) {
  EXPECT_THROW(ControlClient("localhost", 0.1, kHello), InputError);
  EXPECT_THROW(ControlClient("127.0.0.1:notaport", 0.1, kHello), InputError);
}

}  // namespace
}  // namespace crystal::control
