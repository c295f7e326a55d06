#include "plugin/interpose/block_pool.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "crystal/base/error.h"
#include "crystal/control/protocol.h"
#include "crystal/live/nccl_slots.h"
#include "plugin/cuda_driver.h"
#include "plugin/interpose/host_session.h"

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

void waitStream(cuda::Stream s) {
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
  cuda::check(rc, "zeroing the P2P pool (cuEventQuery)");
}

}  // namespace

int offerBlockPool(std::uint64_t comm_hash, int rank, const char* caller) noexcept {
  try {
    const auto size = poolSizeFromEnv();
    if (!size || size->recv + size->send == 0) return kNcclSuccess;
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
      waitStream(s);
    } catch (...) {
      (void)d.streamDestroy(s);
      throw;
    }
    (void)d.streamDestroy(s);
    // The blocks live as long as the process: NCCL never frees memory it did not allocate.
    return hostBlockPool(pool, caller);
  } catch (const InputError& e) {
    return reportError(caller, e.what(), kNcclInvalidUsage);
  } catch (const std::exception& e) {
    return reportError(caller, std::string("P2P block pool: ") + e.what(), kNcclSystemError);
  }
}

}  // namespace crystal::interpose
