#include "plugin/interpose/block_pool.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "crystal/base/error.h"
#include "crystal/base/thread_name.h"
#include "crystal/control/protocol.h"
#include "crystal/live/nccl_slots.h"
#include "plugin/cuda_driver.h"
#include "plugin/p2p_agent.h"
#include "plugin/p2p_protocol.h"
#include "plugin/state.h"
#include "plugin/interpose/control_client.h"
#include "plugin/interpose/host_session.h"
#include "plugin/interpose/real_nccl.h"

namespace crystal::interpose {

namespace cuda = plugin::cuda;

std::optional<PoolSize> poolSizeFromEnv() {
  const char* v = std::getenv(kEnvP2pPool);
  if (v == nullptr || *v == '\0') return std::nullopt;
  PoolSize p;
  char comma = 0, extra = 0;
  if (std::sscanf(v, "%d%c%d%c", &p.recv, &comma, &p.send, &extra) != 3 || comma != ',' ||
      p.recv < 0 || p.send < 0 ||
      static_cast<std::size_t>(p.recv) + static_cast<std::size_t>(p.send) >
          control::kMaxPoolBlocks)
    throw InputError(std::string(kEnvP2pPool) + "='" + v +
                     "': expected RECV,SEND block counts (together at most " +
                     std::to_string(control::kMaxPoolBlocks) + ")");
  return p;
}

namespace {

// Stream-ordered allocations on a private stream, zeroed there, then waited for: NCCL's
// kernels (other streams) use them only after the host has answered the exchange, long after.
std::vector<std::uint64_t> allocateZeroed(cuda::Stream s, int count, std::uint64_t bytes) {
  const cuda::DriverApi& d = cuda::driver();
  std::vector<std::uint64_t> out;
  for (int i = 0; i < count; ++i) {
    cuda::DevicePtr p = 0;
    cuda::check(d.memAllocAsync(&p, bytes, s), "cuMemAllocAsync (P2P pool block)");
    cuda::check(d.memsetD8Async(p, 0, bytes, s), "cuMemsetD8Async (P2P pool block)");
    out.push_back(p);
  }
  return out;
}

void waitStream(cuda::Stream s, const char* what) {
  const cuda::DriverApi& d = cuda::driver();
  cuda::Event e = nullptr;
  cuda::check(d.eventCreate(&e, cuda::kEventDisableTiming), "cuEventCreate");
  cuda::check(d.eventRecord(e, s), "cuEventRecord");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  cuda::Result rc = cuda::kNotReady;
  while ((rc = d.eventQuery(e)) == cuda::kNotReady) {
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  (void)d.eventDestroy(e);
  cuda::check(rc, what);
}

// Gives back a pool the host will not use (stream-ordered frees, waited for).
void freeBlocks(const control::BlockPool& pool) {
  const cuda::DriverApi& d = cuda::driver();
  cuda::Stream s = nullptr;
  cuda::check(d.streamCreate(&s, cuda::kStreamNonBlocking), "cuStreamCreate");
  for (const auto* blocks : {&pool.recv, &pool.send})
    for (const std::uint64_t p : *blocks)
      cuda::check(d.memFreeAsync(static_cast<cuda::DevicePtr>(p), s),
                  "cuMemFreeAsync (unused P2P pool block)");
  waitStream(s, "freeing an unused P2P pool (cuEventQuery)");
  (void)d.streamDestroy(s);
}

// One thread per process polls the host for the stores its pool connections are owed and
// makes them (8-byte copies on its own stream, in the context that created the comm). Every
// millisecond while stores keep coming, every 10 ms after a quiet second: connections are made
// at a communicator's first collectives, so a store waits at most that long. It stops, with
// one line, when the host cannot be reached.
class WritePoller {
 public:
  static WritePoller& get() {
    static auto* p = new WritePoller;  // never destroyed: the thread may outlive exit handlers
    return *p;
  }
  void watch(std::uint64_t comm_hash, int rank, cuda::Context ctx) {
    std::lock_guard lock(mu_);
    comms_.push_back({comm_hash, rank, ctx});
    if (!started_) {
      started_ = true;
      std::thread([this] {
        nameThisThread("crystal stores");
        run();
      }).detach();
    }
  }

 private:
  struct Watched {
    std::uint64_t hash;
    int rank;
    cuda::Context ctx;
  };
  void run() {
    try {
      const auto addr = hostAddress();
      if (!addr) return;
      control::Hello hello;
      hello.pid = static_cast<std::uint32_t>(::getpid());
      hello.nccl_version = realNcclVersion();
      ControlClient client(*addr, kDefaultTimeoutS, hello);
      const cuda::DriverApi& d = cuda::driver();
      std::map<cuda::Context, cuda::Stream> streams;  // a stream belongs to one context
      auto quiet_since = std::chrono::steady_clock::now();
      for (;;) {
        std::vector<Watched> comms;
        {
          std::lock_guard lock(mu_);
          comms = comms_;
        }
        bool any = false;
        for (const auto& w : comms) {
          const control::Writes got = client.getWrites({w.hash, w.rank});
          if (got.writes.empty()) continue;
          any = true;
          cuda::check(d.ctxSetCurrent(w.ctx), "cuCtxSetCurrent (P2P pool stores)");
          cuda::Stream& stream = streams[w.ctx];
          if (stream == nullptr)
            cuda::check(d.streamCreate(&stream, cuda::kStreamNonBlocking), "cuStreamCreate");
          // A ring connection to a ring neighbour goes to the comm's pacing agent (its
          // counter moves by the model); any other runs free.
          const auto agent = plugin::P2pAgent::find(w.hash);
          for (const auto& x : got.writes) {
            if (agent && agent->add({x.address, x.watch, x.peer, x.nranks, x.ordinal, x.send(),
                                     x.graph()}))
              continue;
            cuda::check(d.memcpyHtoDAsync(x.address, &x.value, sizeof x.value, stream),
                        "cuMemcpyHtoDAsync (P2P pool store)");
          }
          waitStream(stream, "P2P pool stores (cuEventQuery)");
        }
        const auto now = std::chrono::steady_clock::now();
        if (any) quiet_since = now;
        std::this_thread::sleep_for(now - quiet_since < std::chrono::seconds(1)
                                        ? std::chrono::milliseconds(1)
                                        : std::chrono::milliseconds(10));
      }
    } catch (const std::exception& e) {
      (void)reportError("P2P pool stores", std::string(e.what()) + " (no more stores made)",
                        kNcclSystemError);
    }
  }
  std::mutex mu_;
  bool started_ = false;
  std::vector<Watched> comms_;
};

}  // namespace

int offerBlockPool(std::uint64_t comm_hash, int rank, int nranks, const char* caller) noexcept {
  try {
    const auto size = poolSizeFromEnv();
    if (!size || size->recv + size->send == 0) return kNcclSuccess;
    if (const auto why = plugin::p2pProtocolProblem(std::getenv("NCCL_PROTO"),
                                                    std::getenv("NCCL_P2P_LL_THRESHOLD")))
      throw InputError(*why + ": its receives from the virtual GPUs of this rank's node "
                              "(emulation.p2p_peers) would wait for ever on LL flags no one "
                              "writes; set NCCL_PROTO=Simple and NCCL_P2P_LL_THRESHOLD=0 "
                              "(crystal emulate's defaults under p2p_peers)");
    const cuda::DriverApi& d = cuda::driver();
    cuda::Context ctx = nullptr;
    cuda::check(d.ctxGetCurrent(&ctx), "cuCtxGetCurrent");
    if (ctx == nullptr)
      throw ProtocolError("no CUDA context is current in the thread that created the comm");
    cuda::Stream s = nullptr;
    cuda::check(d.streamCreate(&s, cuda::kStreamNonBlocking), "cuStreamCreate");
    control::BlockPool pool;
    pool.comm_hash = comm_hash;
    pool.rank = rank;
    pool.recv_block_bytes = live::kP2pRecvBlockBytes;
    pool.send_block_bytes = live::kP2pSendBlockBytes;
    try {
      pool.recv = allocateZeroed(s, size->recv, pool.recv_block_bytes);
      pool.send = allocateZeroed(s, size->send, pool.send_block_bytes);
      waitStream(s, "zeroing the P2P pool (cuEventQuery)");
    } catch (...) {
      (void)d.streamDestroy(s);
      throw;
    }
    (void)d.streamDestroy(s);
    control::PoolPlace place;
    if (const int rc = hostBlockPool(pool, place, caller); rc != kNcclSuccess) return rc;
    if (place.members == 0) {
      // Another real rank on this node, or a split child not made of whole nodes: no P2P
      // connection to a virtual GPU will ask for a block.
      try {
        freeBlocks(pool);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "crystal: %s: the unused P2P pool of comm %#llx rank %d: %s\n", caller,
                     static_cast<unsigned long long>(comm_hash), rank, e.what());
      }
      return kNcclSuccess;
    }
    // The blocks live as long as the process: NCCL never frees memory it did not allocate.
    // Rings that stay on this node at this rank run on every channel, paced; folding them
    // would only slow them (PluginState::setCommRingsOnNode).
    plugin::PluginState& st = plugin::PluginState::get();
    st.ensureInit();
    const plugin::RingNeighbours ring{place.prev, place.next};
    if (plugin::p2pRingsStayOnNode(place.members, ring)) st.setCommRingsOnNode(comm_hash);
    // Every node full: the host copies this rank's node for the others, so NCCL's tree runs
    // over nodes (its NET links at the nodes' heads), not over one node per rank.
    const int gpn = st.config().cluster.gpus_per_node;
    if (place.members == gpn && nranks > gpn && nranks % gpn == 0)
      st.setCommNodeRanks(comm_hash, gpn);
    // Pacing of the pool's ring connections (plugin/p2p_agent.h); without it they run free.
    std::string why;
    if (!plugin::P2pAgent::create(comm_hash, rank, nranks, ctx, ring, place.tree_channels, &why))
      std::fprintf(stderr,
                   "crystal: %s: P2P pacing off for comm %#llx rank %d (%s): the virtual GPUs of "
                   "this rank's node never make it wait\n",
                   caller, static_cast<unsigned long long>(comm_hash), rank, why.c_str());
    WritePoller::get().watch(comm_hash, rank, ctx);
    return kNcclSuccess;
  } catch (const InputError& e) {
    return reportError(caller, e.what(), kNcclInvalidUsage);
  } catch (const std::exception& e) {
    return reportError(caller, std::string("P2P block pool: ") + e.what(), kNcclSystemError);
  }
}

}  // namespace crystal::interpose
