// An LL receive from a virtual peer into GPU memory under data policy none: what NCCL's proxy
// thread spends in irecv + the completing test() when the flags go to the GPU flag writer
// (flag_writer.h: a command in a mapped host ring). The CUDA driver is the tests' fake, so
// this is the CPU side only; the driver path it replaces cost 4.1 us per receive on the H200
// (cuMemsetD2D32Async, counted by the plugin's call stats on 2026-12-03). Target: < 1 us.
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
#include "fake_cuda_driver.h"
#include "flag_writer.h"
#include "net_api.h"
#include "state.h"

namespace {

using namespace crystal;
namespace net = crystal::plugin::net;

constexpr std::size_t kLLStep = 65536;  // an LL slot (512 KiB buffer / 8)
const unsigned char kImage[16] = {};

void BM_LLReceiveFlagsThroughTheGpuWriter(benchmark::State& state) {
  plugin::PluginState& st = plugin::PluginState::get();
  st.ensureInit();
  Config cfg = st.config();
  const DataPolicy before = st.dataPolicy();
  ::unsetenv("CRYSTAL_DATA");
  ::unsetenv("CRYSTAL_GPU_WRITER");
  cfg.emulation.data = DataPolicy::None;
  st.configure(cfg);
  test::FakeGpu& gpu = test::installFakeDriver();
  plugin::FlagWriter::setImageForTesting(kImage);
  gpu.kernel_runs = false;  // the kernel keeps running; drained below, outside the timing
  std::vector<double> ns;
  {
    void* ctx = nullptr;
    void* listen = nullptr;
    void* comm = nullptr;
    if (net::init(&ctx, 0x77, nullptr, nullptr, nullptr) != nccl::ncclSuccess) std::abort();
    char bytes[live::kNcclHandleSize] = {};
    if (net::listen(ctx, 0, bytes, &listen) != nccl::ncclSuccess) std::abort();
    live::NetHandle h;
    if (!live::decodeHandle(bytes, h)) std::abort();
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = h.port;
    std::memcpy(&sin.sin_addr, h.addr, 4);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) std::abort();
    live::Hello hello;
    hello.peer = live::PeerKind::Virtual;
    hello.listen_id = h.listen_id;
    hello.comm_id = h.comm_id;
    if (::send(fd, &hello, sizeof hello, 0) != static_cast<ssize_t>(sizeof hello)) std::abort();
    while (!comm)
      if (net::accept(listen, &comm, nullptr) != nccl::ncclSuccess) std::abort();
    std::vector<char> ll(8 * kLLStep);
    void* mr = nullptr;
    if (net::regMr(comm, ll.data(), ll.size(), nccl::NCCL_PTR_CUDA, &mr) != nccl::ncclSuccess)
      std::abort();
    int slot = 0;
    for (auto _ : state) {
      void* data = ll.data() + static_cast<std::size_t>(slot) * kLLStep;
      std::size_t size = kLLStep;
      int tag = 1;
      void* req = nullptr;
      const live::TimeNs t0 = live::nowNs();
      if (net::irecv(comm, 1, &data, &size, &tag, &mr, nullptr, &req) != nccl::ncclSuccess || !req)
        std::abort();
      const live::TimeNs t1 = live::nowNs();
      int done = 0;
      live::TimeNs t2 = 0, t3 = 0;
      while (!done) {
        t2 = live::nowNs();
        if (net::test(req, &done, nullptr) != nccl::ncclSuccess) std::abort();
        t3 = live::nowNs();
      }
      ns.push_back(static_cast<double>((t1 - t0) + (t3 - t2)));
      slot = (slot + 1) % 8;
      state.PauseTiming();
      if (slot == 0) (void)test::drainFakeFlagRing();  // the "GPU" runs what was posted
      state.ResumeTiming();
    }
    state.counters["memsets"] = static_cast<double>(gpu.count("cuMemsetD2D32Async"));
    (void)net::closeRecv(comm);
    (void)net::closeListen(listen);
    ::close(fd);
    (void)net::finalize(ctx);
  }
  test::uninstallFakeDriver();
  plugin::FlagWriter::setImageForTesting(nullptr);
  std::nth_element(ns.begin(), ns.begin() + static_cast<std::ptrdiff_t>(ns.size() / 2), ns.end());
  state.counters["ns_per_receive"] = ns.empty() ? 0 : ns[ns.size() / 2];
  state.counters["target_ns"] = 1000;
  state.counters["h200_memset_ns"] = 4090;
  cfg.emulation.data = before;
  st.configure(cfg);
}
BENCHMARK(BM_LLReceiveFlagsThroughTheGpuWriter)->Iterations(20000);

}  // namespace
