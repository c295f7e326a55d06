// A virtual receive comm for the plugin's benchmarks: a listen, the host's Hello for a
// virtual sender, and LL, LL128 and Simple regions registered as host or GPU memory; one
// receive of a slot timed as NCCL's proxy calls it (irecv, then test() until done).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "crystal/live/clock.h"
#include "crystal/live/handle.h"
#include "net_api.h"
#include "state.h"

namespace crystal::bench {

namespace net = crystal::plugin::net;

constexpr std::size_t kStep = 512 << 10;  // a Simple slot (4 MiB buffer / 8)

// One virtual recv comm with LL, LL128 and Simple regions of the given pointer type.
struct VirtualRecv {
  void* ctx = nullptr;
  void* listen = nullptr;
  void* comm = nullptr;
  int host_fd = -1;
  std::vector<char> ll = std::vector<char>(8 * 65536), ll128 = std::vector<char>(8 * 614400),
                    simple = std::vector<char>(8 * kStep);
  void* mr[3] = {};
  explicit VirtualRecv(int type) {
    if (net::init(&ctx, 7 + type, nullptr, nullptr, nullptr) != nccl::ncclSuccess) std::abort();
    char bytes[live::kNcclHandleSize] = {};
    if (net::listen(ctx, 0, bytes, &listen) != nccl::ncclSuccess) std::abort();
    live::NetHandle h;
    if (!live::decodeHandle(bytes, h)) std::abort();
    host_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = h.port;
    std::memcpy(&sin.sin_addr, h.addr, 4);
    if (::connect(host_fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) std::abort();
    live::Hello hello;
    hello.peer = live::PeerKind::Virtual;
    hello.listen_id = h.listen_id;
    hello.comm_id = h.comm_id;
    if (::send(host_fd, &hello, sizeof hello, 0) != static_cast<ssize_t>(sizeof hello))
      std::abort();
    while (!comm)
      if (net::accept(listen, &comm, nullptr) != nccl::ncclSuccess) std::abort();
    std::vector<char>* bufs[3] = {&ll, &ll128, &simple};
    for (int i = 0; i < 3; ++i)
      if (net::regMr(comm, bufs[i]->data(), bufs[i]->size(), type, &mr[i]) != nccl::ncclSuccess)
        std::abort();
  }
  ~VirtualRecv() {
    (void)net::closeRecv(comm);
    (void)net::closeListen(listen);
    ::close(host_fd);
    (void)net::finalize(ctx);
  }
  // irecv of one Simple slot, then test() until done: (ns of irecv + the completing test,
  // ns per "not yet" test).
  std::pair<double, double> receive(int slot) { return receive(2, slot, kStep); }
  // The same for a slot of `step` bytes of region 0 (LL), 1 (LL128) or 2 (Simple).
  std::pair<double, double> receive(int region, int slot, std::size_t step) {
    std::vector<char>* bufs[3] = {&ll, &ll128, &simple};
    void* data = bufs[region]->data() + static_cast<std::size_t>(slot) * step;
    std::size_t size = step;
    int tag = 1;
    void* req = nullptr;
    const live::TimeNs t0 = live::nowNs();
    if (net::irecv(comm, 1, &data, &size, &tag, &mr[region], nullptr, &req) != nccl::ncclSuccess || !req)
      std::abort();
    const live::TimeNs t1 = live::nowNs();
    int done = 0;
    long waits = 0;
    live::TimeNs waited = 0, t2 = 0, t3 = 0;
    while (!done) {
      t2 = live::nowNs();
      if (net::test(req, &done, nullptr) != nccl::ncclSuccess) std::abort();
      t3 = live::nowNs();
      if (!done) {
        ++waits;
        waited += t3 - t2;
      }
    }
    return {static_cast<double>((t1 - t0) + (t3 - t2)),
            waits ? static_cast<double>(waited) / static_cast<double>(waits) : 0.0};
  }
};

// Data policy none for the life of the object, whatever ran before in the process (the
// plugin's state is per process); the previous policy comes back at the end.
class DataPolicyNone {
 public:
  DataPolicyNone() : st_(plugin::PluginState::get()) {
    st_.ensureInit();
    before_ = st_.dataPolicy();
    ::unsetenv("CRYSTAL_DATA");
    Config cfg = st_.config();
    cfg.emulation.data = DataPolicy::None;
    st_.configure(cfg);
  }
  ~DataPolicyNone() {
    Config cfg = st_.config();
    cfg.emulation.data = before_;
    st_.configure(cfg);
  }
  DataPolicyNone(const DataPolicyNone&) = delete;
  DataPolicyNone& operator=(const DataPolicyNone&) = delete;

 private:
  plugin::PluginState& st_;
  DataPolicy before_ = DataPolicy::None;
};

inline double median(std::vector<double>& v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace crystal::bench
