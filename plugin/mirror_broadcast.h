// Data policy mirror for a broadcast whose root is a virtual rank. Every virtual rank holds
// a copy of the real rank's data, so the root's buffer is a copy of the real rank's own and
// the result the real rank must see is its own send buffer (its buffer before the call, for
// the in-place broadcast PyTorch issues). Without this, the virtual root's bytes are zeros:
// nothing of the real rank is sent before it receives (a broadcast forwards what it gets),
// so DDP's construction (a broadcast of parameter metadata from rank 0) fails. NCCL still
// runs the broadcast, so the virtual peers' timing and NCCL's sequence stay as they are;
// around it, on the caller's stream (stream order, no host wait):
//   out-of-place: after  — recv <- send
//   in-place:     before — scratch <- recv (cuMemAllocAsync); after — recv <- scratch, free.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "cuda_driver.h"

namespace crystal::plugin {

// Bytes of one element of ncclDataType_t `type` (NCCL 2.28: int8 .. float8e5m2), 0 when
// unknown.
[[nodiscard]] std::size_t ncclTypeBytes(int type) noexcept;

// Whether a broadcast on a communicator where this process is rank `self` of `nranks`, from
// `root`, comes from a virtual rank: the root is not this rank, and either the emulation has
// one real rank (`real_ranks`), or the communicator is the world (`world_size` ranks) and
// `root` is not among them. Other cases (several real ranks, a split communicator) are not
// known here: false (the bytes arrive as the data path delivers them).
[[nodiscard]] bool broadcastRootIsVirtual(int self, int nranks, int root,
                                          std::span<const int> real_ranks, int world_size);

class MirrorBroadcast {
 public:
  MirrorBroadcast(const void* send, void* recv, std::size_t bytes, cuda::Stream stream)
      : send_(send), recv_(recv), bytes_(bytes), stream_(stream) {}
  // Throw PluginError(Errc::System) when a driver call fails.
  void before();
  void after();

 private:
  const void* send_;
  void* recv_;
  std::size_t bytes_;
  cuda::Stream stream_;
  cuda::DevicePtr scratch_ = 0;
};

}  // namespace crystal::plugin
