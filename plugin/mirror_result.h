// Data policy mirror: what the real rank must hold after a collective when every virtual rank
// holds a copy of the real rank's data, written by the interposer around NCCL's own call.
//
// NCCL still runs the collective (the virtual peers' timing and NCCL's sequence stay as they
// are); around it, on the caller's stream (stream order, no host wait), the receive buffer is
// set to what N copies of the real rank's input give:
//   broadcast from a virtual root: the real rank's own data. Without this the virtual root's
//     bytes are zeros (the real rank forwards what it receives, so nothing of its own is sent
//     before it receives), and DDP's construction (a broadcast of parameter metadata from
//     rank 0) fails;
//   all-reduce, reduce-scatter, reduce to this rank: sum n * x, product x^n (the mirror kernel,
//     mirror_kernel.h), max / min / avg x. On the NET, a tree's virtual peers send zeros (the
//     plugin cannot scale partial sums it has no copy of) and a ring's sums are approximate.
// The source is the real rank's input (for a reduce-scatter, its own block of the send
// buffer). When the source overlaps the receive buffer (in place), it is kept first:
//   before: scratch <- source (cuMemAllocAsync + copy); after: recv <- f(scratch), free.
// Otherwise: after: recv <- f(source).
#pragma once

#include <cstddef>
#include <cstdint>
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

enum class MirrorAction {
  Copy,   // recv <- source
  Scale,  // recv <- n * source
  Power,  // recv <- source ^ n
};

// The action for ncclRedOp_t `op` over copies: ncclSum -> Scale, ncclProd -> Power, ncclMax,
// ncclMin, ncclAvg -> Copy; nullopt for ops made by ncclRedOpCreatePreMulSum (their scalar is
// not known here).
[[nodiscard]] std::optional<MirrorAction> reductionAction(int op) noexcept;

class MirrorResult {
 public:
  // recv <- action over `n` copies of `count` elements of type `type` at `source`.
  MirrorResult(const void* source, void* recv, std::size_t count, int type, MirrorAction action,
               std::uint64_t n, cuda::Stream stream)
      : source_(source), recv_(recv), count_(count), type_(type), action_(action), n_(n),
        stream_(stream) {}
  MirrorResult(MirrorResult&& o) noexcept;
  MirrorResult& operator=(MirrorResult&&) = delete;
  MirrorResult(const MirrorResult&) = delete;
  ~MirrorResult();  // frees a scratch copy that after() and cancel() did not (stream-ordered)

  // Before NCCL's call; after it (once the collective is enqueued: at the outermost
  // ncclGroupEnd for a grouped call); or cancel when NCCL did not take it. Throw
  // PluginError(Errc::System) when a driver call fails; after() also when Scale/Power has no
  // kernel (`kernel` nullptr: the caller decides beforehand whether to plan one).
  void before();
  void after(cuda::Function kernel);
  void cancel() noexcept;

  [[nodiscard]] std::size_t bytes() const noexcept { return count_ * ncclTypeBytes(type_); }
  [[nodiscard]] bool needsKernel() const noexcept { return action_ != MirrorAction::Copy; }

 private:
  [[nodiscard]] bool overlaps() const noexcept;
  const void* source_;
  void* recv_;
  std::size_t count_;
  int type_;
  MirrorAction action_;
  std::uint64_t n_;
  cuda::Stream stream_;
  cuda::DevicePtr scratch_ = 0;
};

}  // namespace crystal::plugin
