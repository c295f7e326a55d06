// Store benchmarks: parsing PyTorch's init_process_group request sequence, the state
// machine on it, and one ADD round trip over TCP (what each real rank's store call costs).
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "crystal/store/server.h"
#include "store_core.h"
#include "wire.h"

namespace crystal::store {
namespace {

// Rank 5 of 64 at init_process_group + its first collective: handshake, check-in, world id.
std::string initSequence() {
  return client::validate() + client::ping(1234) + client::add("init/", 1) +
         client::wait({"/default_pg/0//cuda//0"}) + client::get("/default_pg/0//cuda//0") +
         client::check({"/exception_dump"});
}

void BM_ParseInitSequence(benchmark::State& state) {
  const std::string bytes = initSequence();
  for (auto _ : state) {
    auto rest = std::as_bytes(std::span(bytes.data(), bytes.size()));
    int n = 0;
    while (!rest.empty()) {
      const ParseResult r = parseRequest(rest);
      rest = rest.subspan(r.consumed);
      ++n;
    }
    benchmark::DoNotOptimize(n);
  }
  state.counters["requests/s"] =
      benchmark::Counter(6.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ParseInitSequence);

void BM_CoreInitSequence(benchmark::State& state) {
  const std::string bytes = initSequence();
  std::vector<Request> reqs;
  for (auto rest = std::as_bytes(std::span(bytes.data(), bytes.size())); !rest.empty();) {
    ParseResult r = parseRequest(rest);
    rest = rest.subspan(r.consumed);
    reqs.push_back(std::move(r.request));
  }
  for (auto _ : state) {
    StoreCore core(VirtualRanks(JobView{.world_size = 8192, .real_ranks = {5}}),
                   [] { return std::string(128, 'M'); });
    Effects fx;
    core.open(1, {});
    for (const auto& r : reqs) core.request(1, r, {}, fx);
    benchmark::DoNotOptimize(fx.replies.size());
  }
}
BENCHMARK(BM_CoreInitSequence);

void BM_TcpAddRoundTrip(benchmark::State& state) {
  StoreServerOptions o;
  o.world_size = 64;
  o.real_ranks = {0};
  o.mint_unique_id = [] { return std::string(128, 'M'); };
  StoreServer server(o);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(server.port());
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    state.SkipWithError("connect");
    return;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const std::string hello = client::validate() + client::ping(1);
  char buf[8];
  if (::send(fd, hello.data(), hello.size(), 0) < 0 || ::recv(fd, buf, 4, MSG_WAITALL) != 4) {
    state.SkipWithError("handshake");
    return;
  }
  const std::string add = client::add("counter", 1);
  for (auto _ : state) {
    if (::send(fd, add.data(), add.size(), 0) < 0 || ::recv(fd, buf, 8, MSG_WAITALL) != 8) {
      state.SkipWithError("round trip");
      break;
    }
  }
  ::close(fd);
}
BENCHMARK(BM_TcpAddRoundTrip)->UseRealTime();

}  // namespace
}  // namespace crystal::store

BENCHMARK_MAIN();
