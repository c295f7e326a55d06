// ControlServer: one poll() thread over the listener, a wake-up pipe and every interposer
// connection. Frames are reassembled per connection; each complete request is answered at
// once. A malformed frame is answered with ERROR and the connection is closed (its framing
// can no longer be trusted); a refused request keeps the connection open.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <thread>

#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "crystal/base/thread_name.h"
#include "crystal/control/codec.h"
#include "crystal/control/server.h"
#include "crystal/control/socket_io.h"

namespace crystal::control {

std::string unsupportedVersionText(int version, std::uint32_t pid,
                                   const std::vector<int>& supported) {
  std::string list;
  for (int v : supported) list += (list.empty() ? "" : ", ") + ncclVersionString(v);
  return "NCCL " + ncclVersionString(version) + " (version code " + std::to_string(version) +
         ") loaded by pid " + std::to_string(pid) +
         " is not supported: crystal's bootstrap stand-in is verified for NCCL " + list +
         " only; make the program load that libnccl.so.2 (LD_LIBRARY_PATH)";
}

namespace {
constexpr double kReplyTimeoutS = 5.0;  // a reply is tiny; a peer that cannot take it is gone

struct Conn {
  Fd fd;
  std::vector<std::uint8_t> in;
  PeerInfo peer;
  bool hello = false;
};
}  // namespace

struct ControlServer::Impl {
  ControlHandler& handler;
  ControlServerOptions opts;
  Fd listener;
  Fd wake_read, wake_write;
  sockaddr_in bound{};
  std::map<int, Conn> conns;
  std::atomic<std::uint64_t> served{0};
  std::thread thread;

  Impl(ControlHandler& h, ControlServerOptions o) : handler(h), opts(std::move(o)) {}

  void bind() {
    const sockaddr_in sa = parseHostPort(opts.listen, "host listen address");
    listener = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int one = 1;
    ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 ||
        ::listen(listener.get(), 128) != 0)
      throw InputError("host listen address '" + opts.listen + "': " + std::strerror(errno));
    socklen_t len = sizeof bound;
    ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    setNonBlocking(listener.get(), true);
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
      throw ProtocolError(std::string("pipe: ") + std::strerror(errno));
    wake_read = Fd(p[0]);
    wake_write = Fd(p[1]);
  }

  void run() {
    for (;;) {
      std::vector<pollfd> pfds{{wake_read.get(), POLLIN, 0}, {listener.get(), POLLIN, 0}};
      for (const auto& [fd, c] : conns) pfds.push_back({fd, POLLIN, 0});
      if (::poll(pfds.data(), pfds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        CRYSTAL_ERROR("control server: poll failed: {}", std::strerror(errno));
        return;
      }
      if (pfds[0].revents) return;  // stop requested
      if (pfds[1].revents & POLLIN) acceptAll();
      for (std::size_t i = 2; i < pfds.size(); ++i)
        if (pfds[i].revents) readFrom(pfds[i].fd);
    }
  }

  void acceptAll() {
    for (;;) {
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      const int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&peer), &len,
                               SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      Conn c;
      c.fd = Fd(fd);
      c.peer.address = formatAddress(peer);
      conns.emplace(fd, std::move(c));
    }
  }

  void close(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    if (it->second.hello) {
      try {
        handler.peerGone(it->second.peer);
      } catch (const std::exception& e) {
        CRYSTAL_WARN("control server: peerGone(pid {}): {}", it->second.peer.pid, e.what());
      }
    }
    conns.erase(it);
  }

  void readFrom(int fd) {
    Conn& c = conns.at(fd);
    std::uint8_t buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR && errno != EWOULDBLOCK)) {
      close(fd);
      return;
    }
    if (n < 0) return;
    c.in.insert(c.in.end(), buf, buf + n);
    while (c.in.size() >= kHeaderSize) {
      Header h;
      Message req;
      try {
        h = decodeHeader(c.in);
        if (c.in.size() < kHeaderSize + h.length) return;  // rest of the frame still coming
        req = decodePayload(h.type, std::span(c.in).subspan(kHeaderSize, h.length));
      } catch (const ProtocolError& e) {
        CRYSTAL_WARN("control server: malformed frame from {}: {}", c.peer.address, e.what());
        reply(c, Error{std::string("malformed control frame: ") + e.what()});
        close(fd);
        return;
      }
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(kHeaderSize + h.length));
      if (!reply(c, answer(c, req))) {
        close(fd);
        return;
      }
    }
  }

  Message answer(Conn& c, const Message& req) {
    served.fetch_add(1, std::memory_order_relaxed);
    try {
      if (const auto* hello = std::get_if<Hello>(&req)) return onHello(c, *hello);
      if (!c.hello)
        return Error{std::string(typeName(typeOfMessage(req))) +
                     " before HELLO: the interposer must introduce itself first"};
      if (std::holds_alternative<GetUniqueId>(req))
        return UniqueIdReply{handler.mintUniqueId(c.peer)};
      if (const auto* init = std::get_if<CommInit>(&req)) {
        handler.commInit(c.peer, *init);
        return Ok{};
      }
      if (const auto* split = std::get_if<CommSplit>(&req)) {
        handler.commSplit(c.peer, *split);
        return Ok{};
      }
      if (const auto* pool = std::get_if<BlockPool>(&req)) return handler.blockPool(c.peer, *pool);
      if (const auto* gw = std::get_if<GetWrites>(&req)) return handler.getWrites(c.peer, *gw);
      if (const auto* note = std::get_if<Note>(&req)) {
        handler.note(c.peer, *note);
        return Ok{};
      }
      return Error{std::string("unexpected ") + typeName(typeOfMessage(req)) +
                   " from a real rank (that is a host -> interposer message)"};
    } catch (const std::exception& e) {
      CRYSTAL_WARN("control server: {} from pid {} refused: {}", typeName(typeOfMessage(req)),
                   c.peer.pid, e.what());
      return Error{e.what()};
    }
  }

  Message onHello(Conn& c, const Hello& h) {
    c.peer.pid = h.pid;
    c.peer.nccl_version = h.nccl_version;
    c.peer.hostid = h.hostid;
    const auto& ok = opts.supported_nccl_versions;
    if (std::find(ok.begin(), ok.end(), h.nccl_version) == ok.end()) {
      c.hello = false;
      return Error{unsupportedVersionText(h.nccl_version, h.pid, ok)};
    }
    c.hello = true;
    CRYSTAL_INFO("control server: real process pid {} (NCCL {}, NCCL_HOSTID '{}') from {}", h.pid,
                 ncclVersionString(h.nccl_version), h.hostid, c.peer.address);
    return HelloOk{handler.emulationId()};
  }

  bool reply(Conn& c, const Message& m) {
    try {
      sendAll(c.fd.get(), encode(m), Deadline(kReplyTimeoutS));
      return true;
    } catch (const ProtocolError& e) {
      CRYSTAL_WARN("control server: reply to pid {} lost: {}", c.peer.pid, e.what());
      return false;
    }
  }
};

ControlServer::ControlServer(ControlHandler& handler, ControlServerOptions opts)
    : impl_(std::make_unique<Impl>(handler, std::move(opts))) {
  impl_->bind();
  impl_->thread = std::thread([this] {
    nameThisThread("crystal control");
    impl_->run();
  });
}

ControlServer::~ControlServer() {
  const char b = 1;
  [[maybe_unused]] const auto n = ::write(impl_->wake_write.get(), &b, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string ControlServer::address() const { return formatAddress(impl_->bound); }

std::uint64_t ControlServer::requestsServed() const {
  return impl_->served.load(std::memory_order_relaxed);
}

}  // namespace crystal::control
