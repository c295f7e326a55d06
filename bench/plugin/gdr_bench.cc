// GPU memory (GDR) must not make a timing run slower: a receive from a virtual peer into a
// Simple buffer in GPU memory under data policy `none` costs the same as one in host memory
// (no driver call; docs/plugin.md "GPU memory (GDR)"). Both are measured in one run,
// interleaved, and reported with their ratio (target: ~1).
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "crystal/live/clock.h"
#include "crystal/live/handle.h"
#include "net_api.h"
#include "state.h"

namespace {

using namespace crystal;
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
  std::pair<double, double> receive(int slot) {
    void* data = simple.data() + static_cast<std::size_t>(slot) * kStep;
    std::size_t size = kStep;
    int tag = 1;
    void* req = nullptr;
    const live::TimeNs t0 = live::nowNs();
    if (net::irecv(comm, 1, &data, &size, &tag, &mr[2], nullptr, &req) != nccl::ncclSuccess || !req)
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

double median(std::vector<double>& v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

void BM_VirtualRecvNoneHostVsGpu(benchmark::State& state) {
  // Data policy none whatever ran before (the state is per process); restored below.
  plugin::PluginState& st = plugin::PluginState::get();
  st.ensureInit();
  Config cfg = st.config();
  const DataPolicy before = st.dataPolicy();
  ::unsetenv("CRYSTAL_DATA");
  cfg.emulation.data = DataPolicy::None;
  st.configure(cfg);
  std::vector<double> host_rt, gpu_rt, host_wait, gpu_wait;
  {
    VirtualRecv host(nccl::NCCL_PTR_HOST), gpu(nccl::NCCL_PTR_CUDA);
    int slot = 0;
    for (auto _ : state) {
      const auto h = host.receive(slot);
      const auto g = gpu.receive(slot);
      slot = (slot + 1) % 8;
      host_rt.push_back(h.first);
      gpu_rt.push_back(g.first);
      if (h.second > 0) host_wait.push_back(h.second);
      if (g.second > 0) gpu_wait.push_back(g.second);
    }
  }
  const double hr = median(host_rt), gr = median(gpu_rt);
  state.counters["host_ns_per_request"] = hr;
  state.counters["gpu_ns_per_request"] = gr;
  state.counters["gpu_over_host"] = hr > 0 ? gr / hr : 0;
  state.counters["host_ns_per_pending_test"] = median(host_wait);
  state.counters["gpu_ns_per_pending_test"] = median(gpu_wait);
  cfg.emulation.data = before;
  st.configure(cfg);
}
BENCHMARK(BM_VirtualRecvNoneHostVsGpu)->MinTime(0.5);

}  // namespace
