#include "mirror_result.h"

#include <algorithm>
#include <utility>

#include "errors.h"
#include "mirror_kernel.h"
#include "mirror_kernel_abi.h"

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

std::optional<MirrorAction> reductionAction(int op) noexcept {
  switch (op) {  // ncclRedOp_t: ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3, ncclAvg 4
    case 0: return MirrorAction::Scale;
    case 1: return MirrorAction::Power;
    case 2: case 3: case 4: return MirrorAction::Copy;
    default: return std::nullopt;
  }
}

MirrorResult::MirrorResult(MirrorResult&& o) noexcept
    : source_(o.source_), recv_(o.recv_), count_(o.count_), type_(o.type_), action_(o.action_),
      n_(o.n_), stream_(o.stream_), scratch_(std::exchange(o.scratch_, 0)) {}

MirrorResult::~MirrorResult() { cancel(); }

bool MirrorResult::overlaps() const noexcept {
  const auto s = reinterpret_cast<std::uintptr_t>(source_);
  const auto r = reinterpret_cast<std::uintptr_t>(recv_);
  return s < r + bytes() && r < s + bytes();
}

void MirrorResult::before() {
  if (bytes() == 0 || !overlaps()) return;
  const cuda::DriverApi& d = cuda::driver();
  cuda::check(d.memAllocAsync(&scratch_, bytes(), stream_), "mirror: cuMemAllocAsync");
  cuda::check(d.memcpyDtoDAsync(scratch_, cuda::dptr(source_), bytes(), stream_),
              "mirror: cuMemcpyDtoDAsync (keep the real rank's input)");
}

void MirrorResult::after(cuda::Function kernel) {
  if (bytes() == 0) return;
  const cuda::DriverApi& d = cuda::driver();
  const cuda::DevicePtr from = scratch_ != 0 ? scratch_ : cuda::dptr(source_);
  if (action_ == MirrorAction::Copy) {
    if (from != cuda::dptr(recv_))
      cuda::check(d.memcpyDtoDAsync(cuda::dptr(recv_), from, bytes(), stream_),
                  "mirror: cuMemcpyDtoDAsync (the virtual ranks' copy)");
  } else {
    if (!kernel) throw PluginError(Errc::System, "mirror: no kernel for an exact reduction result");
    launchMirrorKernel(kernel, cuda::dptr(recv_), from, count_, type_,
                       action_ == MirrorAction::Scale ? mirror_kernel::kScale
                                                      : mirror_kernel::kPower,
                       n_, stream_);
  }
  cancel();
}

void MirrorResult::cancel() noexcept {
  if (scratch_ == 0) return;
  try {
    (void)cuda::driver().memFreeAsync(scratch_, stream_);
  } catch (...) {  // no driver: nothing was allocated through it either
  }
  scratch_ = 0;
}

}  // namespace crystal::plugin
