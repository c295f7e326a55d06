#include "abi_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace crystal::test {

namespace {
int sendHello(const live::NetHandle& h, const live::Hello& hello) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = h.port;
  std::memcpy(&sa.sin_addr, h.addr, 4);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  if (::send(fd, &hello, sizeof hello, 0) != static_cast<ssize_t>(sizeof hello)) {
    ::close(fd);
    return -1;
  }
  return fd;
}
}  // namespace

int openRingHello(const live::NetHandle& h, int receiver, int nranks, int ordinal) {
  live::Hello hello;
  hello.peer = live::PeerKind::Virtual;
  hello.listen_id = h.listen_id;
  hello.comm_id = h.comm_id;
  hello.sender_rank = (receiver - 1 + nranks) % nranks;
  hello.receiver_rank = receiver;
  hello.nranks = nranks;
  hello.distance = 1;
  hello.ordinal = static_cast<std::uint16_t>(ordinal);
  hello.graph = live::kGraphRing;
  return sendHello(h, hello);
}

int openHello(const live::NetHandle& h, live::PeerKind kind, std::uint32_t listen_id_override) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = h.port;
  std::memcpy(&sa.sin_addr, h.addr, 4);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  live::Hello hello;
  hello.peer = kind;
  hello.listen_id = listen_id_override ? listen_id_override : h.listen_id;
  hello.comm_id = h.comm_id;
  if (::send(fd, &hello, sizeof hello, 0) != static_cast<ssize_t>(sizeof hello)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace crystal::test
