// The socket side of the store: one thread, poll() over the listener, a wake-up pipe and
// every client connection. Bytes in -> parseRequest -> StoreCore -> bytes out. A handful
// of connections per real rank, so poll() is plenty.
#include "crystal/store/server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <thread>

#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "crystal/base/thread_name.h"
#include "crystal/control/socket_io.h"
#include "store_core.h"

namespace crystal::store {

namespace {
struct Client {
  control::Fd fd;
  std::string rx;
  std::string tx;
  bool closing = false;  // close once tx is flushed
};
constexpr int kTickMs = 100;
}  // namespace

struct StoreServer::Impl {
  control::Fd listen_fd;
  int wake_rd = -1, wake_wr = -1;
  std::string host;
  std::uint16_t port = 0;
  mutable std::mutex mu;  // core + errors (nameProcess/errors come from other threads)
  StoreCore core;
  std::vector<std::string> error_lines;
  std::map<ConnId, Client> clients;
  ConnId next_id = 1;
  std::atomic<bool> stop{false};
  std::thread thread;

  explicit Impl(const StoreServerOptions& o)
      : core(VirtualRanks(JobView{o.world_size, o.real_ranks, o.ranks_per_root}), o.mint_unique_id,
             CoreOptions{o.wait_timeout}) {
    if (!o.mint_unique_id) throw InputError("store: no ncclUniqueId source given");
    sockaddr_in sa = control::parseHostPort(o.listen, "store address");
    listen_fd = control::Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!listen_fd.valid()) throw InputError(std::string("store: socket: ") + std::strerror(errno));
    const int one = 1;
    ::setsockopt(listen_fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listen_fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
      throw InputError("store: cannot bind " + o.listen + ": " + std::strerror(errno));
    if (::listen(listen_fd.get(), SOMAXCONN) != 0)
      throw InputError(std::string("store: listen: ") + std::strerror(errno));
    socklen_t len = sizeof sa;
    ::getsockname(listen_fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
    const std::string addr = control::formatAddress(sa);
    host = addr.substr(0, addr.rfind(':'));
    if (host == "0.0.0.0") host = "127.0.0.1";
    port = ntohs(sa.sin_port);
    control::setNonBlocking(listen_fd.get(), true);
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
      throw InputError(std::string("store: pipe: ") + std::strerror(errno));
    wake_rd = p[0];
    wake_wr = p[1];
    thread = std::thread([this] {
      nameThisThread("crystal store");
      run();
    });
  }

  ~Impl() {
    stop.store(true);
    const char b = 1;
    [[maybe_unused]] const auto n = ::write(wake_wr, &b, 1);
    if (thread.joinable()) thread.join();
    ::close(wake_rd);
    ::close(wake_wr);
  }

  void apply(Effects& fx) {
    for (auto& line : fx.notes) CRYSTAL_INFO("{}", line);
    for (auto& line : fx.errors) {
      CRYSTAL_ERROR("{}", line);
      error_lines.push_back(line);
    }
    for (auto& [id, bytes] : fx.replies)
      if (auto c = clients.find(id); c != clients.end()) c->second.tx += bytes;
    for (ConnId id : fx.closes)
      if (auto c = clients.find(id); c != clients.end()) c->second.closing = true;
    fx = {};
  }

  void accept() {
    for (;;) {
      const int fd = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const ConnId id = next_id++;
      clients[id].fd = control::Fd(fd);
      core.open(id, Clock::now());
    }
  }

  // Reads what is there and runs every complete request, also those that arrived just
  // before the peer closed (a rank may SET and exit); false when the peer is gone.
  bool readFrom(ConnId id, Client& c, Effects& fx) {
    char buf[65536];
    bool alive = true;
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
      if (n > 0) {
        c.rx.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      alive = false;
      break;
    }
    std::size_t off = 0;
    while (!c.closing && off < c.rx.size()) {
      const auto bytes = std::as_bytes(std::span(c.rx.data() + off, c.rx.size() - off));
      ParseResult pr = parseRequest(bytes);
      if (pr.status == ParseStatus::NeedMore) break;
      if (pr.status == ParseStatus::Invalid) {
        core.malformed(id, pr.error, fx);
        off = c.rx.size();
        break;
      }
      off += pr.consumed;
      core.request(id, pr.request, Clock::now(), fx);
      if (std::find(fx.closes.begin(), fx.closes.end(), id) != fx.closes.end()) c.closing = true;
    }
    c.rx.erase(0, off);
    return alive;
  }

  static bool flush(Client& c) {
    while (!c.tx.empty()) {
      const ssize_t n = ::send(c.fd.get(), c.tx.data(), c.tx.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.tx.erase(0, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
    return true;
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<ConnId> ids;
    while (!stop.load()) {
      fds.clear();
      ids.clear();
      fds.push_back({wake_rd, POLLIN, 0});
      fds.push_back({listen_fd.get(), POLLIN, 0});
      {
        std::lock_guard lock(mu);
        for (auto& [id, c] : clients) {
          fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.tx.empty() ? 0 : POLLOUT)), 0});
          ids.push_back(id);
        }
      }
      const int n = ::poll(fds.data(), fds.size(), kTickMs);
      if (n < 0 && errno != EINTR) {
        CRYSTAL_ERROR("store: poll: {}", std::strerror(errno));
        return;
      }
      std::lock_guard lock(mu);
      Effects fx;
      if (fds[0].revents != 0) {
        char drain[64];
        while (::read(wake_rd, drain, sizeof drain) > 0) {
        }
      }
      if (fds[1].revents & POLLIN) accept();
      std::vector<ConnId> gone;
      for (std::size_t i = 2; i < fds.size(); ++i) {
        const ConnId id = ids[i - 2];
        auto it = clients.find(id);
        if (it == clients.end()) continue;
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !readFrom(id, it->second, fx)) {
          gone.push_back(id);
          continue;
        }
      }
      core.tick(Clock::now(), fx);
      apply(fx);
      for (ConnId id : gone) {
        core.closed(id);
        clients.erase(id);
      }
      for (auto it = clients.begin(); it != clients.end();) {
        Client& c = it->second;
        const bool ok = flush(c);
        if (!ok || (c.closing && c.tx.empty())) {
          core.closed(it->first);
          it = clients.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
};

StoreServer::StoreServer(StoreServerOptions options) : impl_(std::make_unique<Impl>(options)) {}
StoreServer::~StoreServer() = default;

std::string StoreServer::host() const { return impl_->host; }
std::uint16_t StoreServer::port() const { return impl_->port; }
void StoreServer::nameProcess(std::uint32_t pid, int rank) {
  std::lock_guard lock(impl_->mu);
  impl_->core.nameProcess(pid, rank);
}
std::size_t StoreServer::errorCount() const {
  std::lock_guard lock(impl_->mu);
  return impl_->error_lines.size();
}
std::vector<std::string> StoreServer::errors() const {
  std::lock_guard lock(impl_->mu);
  return impl_->error_lines;
}

}  // namespace crystal::store
