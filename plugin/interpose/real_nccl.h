// The real NCCL entry points behind the interposer. Looked up in the already-loaded
// libnccl.so.2 (dlopen RTLD_NOLOAD + dlsym): PyTorch loads NCCL in a local scope, where
// dlsym(RTLD_NEXT) finds nothing (research/interposition-seen.md); RTLD_NEXT is only the
// fallback for a program that loaded NCCL under another name.
#pragma once

#include <atomic>

namespace crystal::interpose {

// ABI of NCCL's public types, declared here so the plugin needs no nccl.h.
struct NcclUniqueId {
  char internal[128];
};
using NcclComm = void*;  // ncclComm_t

// ncclResult_t values (nccl.h).
inline constexpr int kNcclSuccess = 0;
inline constexpr int kNcclSystemError = 2;
inline constexpr int kNcclInvalidUsage = 5;
inline constexpr int kNcclRemoteError = 6;
inline constexpr int kNcclInProgress = 7;
inline constexpr int kNcclSplitNoColor = -1;

using GetVersionFn = int (*)(int*);
using GetUniqueIdFn = int (*)(NcclUniqueId*);
using CommInitRankFn = int (*)(NcclComm*, int, NcclUniqueId, int);
using CommInitRankConfigFn = int (*)(NcclComm*, int, NcclUniqueId, int, void*);
using CommInitRankScalableFn = int (*)(NcclComm*, int, int, int, NcclUniqueId*, void*);
using CommInitAllFn = int (*)(NcclComm*, int, const int*);
using CommSplitFn = int (*)(NcclComm, int, int, NcclComm*, void*);
using CommFn = int (*)(NcclComm);
using CommIntFn = int (*)(NcclComm, int*);

// Address of the real `name`, or nullptr (and one stderr line) if NCCL is not loaded.
[[nodiscard]] void* realSymbol(const char* name) noexcept;

template <typename Fn>
[[nodiscard]] Fn real(const char* name) noexcept {
  return reinterpret_cast<Fn>(realSymbol(name));
}

// The real `name`, looked up once into `slot` (for calls on the program's hot path).
template <typename Fn>
[[nodiscard]] Fn cachedReal(std::atomic<void*>& slot, const char* name) noexcept {
  void* p = slot.load(std::memory_order_acquire);
  if (p == nullptr) {
    p = realSymbol(name);
    slot.store(p, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(p);
}

// ncclGetVersion() of the loaded NCCL, 0 if unavailable.
[[nodiscard]] int realNcclVersion() noexcept;

}  // namespace crystal::interpose
