#include "mirror_broadcast.h"

#include <algorithm>

namespace crystal::plugin {

std::size_t ncclTypeBytes(int type) noexcept {
  // ncclInt8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16,
  // Float8e4m3, Float8e5m2 (nccl.h of 2.28).
  constexpr std::size_t kBytes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return type >= 0 && type < static_cast<int>(std::size(kBytes)) ? kBytes[type] : 0;
}

bool broadcastRootIsVirtual(int self, int nranks, int root, std::span<const int> real_ranks,
                            int world_size) {
  if (root == self || root < 0 || root >= nranks) return false;
  if (real_ranks.size() == 1) return true;
  return nranks == world_size &&
         std::find(real_ranks.begin(), real_ranks.end(), root) == real_ranks.end();
}

void MirrorBroadcast::before() {
  if (bytes_ == 0 || send_ != recv_) return;
  const cuda::DriverApi& d = cuda::driver();
  cuda::check(d.memAllocAsync(&scratch_, bytes_, stream_), "mirror broadcast: cuMemAllocAsync");
  cuda::check(d.memcpyDtoDAsync(scratch_, cuda::dptr(recv_), bytes_, stream_),
              "mirror broadcast: cuMemcpyDtoDAsync (keep the real rank's buffer)");
}

void MirrorBroadcast::after() {
  if (bytes_ == 0) return;
  const cuda::DriverApi& d = cuda::driver();
  const cuda::DevicePtr from = send_ != recv_ ? cuda::dptr(send_) : scratch_;
  cuda::check(d.memcpyDtoDAsync(cuda::dptr(recv_), from, bytes_, stream_),
              "mirror broadcast: cuMemcpyDtoDAsync (the virtual root's copy)");
  if (scratch_ != 0) {
    cuda::check(d.memFreeAsync(scratch_, stream_), "mirror broadcast: cuMemFreeAsync");
    scratch_ = 0;
  }
}

}  // namespace crystal::plugin
