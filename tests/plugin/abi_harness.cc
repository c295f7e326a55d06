#include "abi_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace crystal::test {

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
