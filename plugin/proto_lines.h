// NCCL's LL and LL128 wire lines, written by the CPU into a host receive buffer on behalf of
// a virtual sender, and the connection step those lines must carry.
//
// Facts (NCCL 2.28.9, src/include/device.h, src/device/prims_ll.h, prims_ll128.h):
//   * LL line = 16 B {u32 data1, u32 flag1, u32 data2, u32 flag2}; 8 payload bytes, the low
//     half in data1. The receiving GPU loads the line with one 16-byte volatile load and
//     spins until flag1 == flag2 == (u32)(step + 1) (NCCL_LL_FLAG: plain truncation).
//   * LL128 line = 128 B = 16 x u64; u64 #15 is the flag = step + 1 (full 64 bits), the
//     other 15 u64 carry data (their order within a line is the sender's warp layout; a
//     copy line by line keeps it).
//   * `step` is the connection's absolute step; its slot is step % NCCL_STEPS (8) and every
//     protocol of a connection shares the one counter.
// Stores: each LL data/flag pair is one aligned 8-byte store (NCCL relies on 8-byte
// atomicity the same way); LL128 lines get all data first, then a release fence, then the
// flags, so a flag is never visible before the data of a slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace crystal::plugin::proto {

enum class Proto : std::uint8_t { LL = 0, LL128 = 1, Simple = 2 };  // NCCL_PROTO_* order

inline constexpr int kSteps = 8;                   // NCCL_STEPS
inline constexpr std::size_t kLLLine = 16;         // sizeof(ncclLLFifoLine)
inline constexpr std::size_t kLL128Line = 128;     // NCCL_LL128_LINESIZE
inline constexpr std::size_t kLL128FlagWord = 15;  // u64 index of the flag in a line

[[nodiscard]] constexpr std::uint32_t llFlag(std::uint64_t step) noexcept {
  return static_cast<std::uint32_t>(step + 1);
}
[[nodiscard]] constexpr std::uint64_t ll128Flag(std::uint64_t step) noexcept { return step + 1; }

// Reconstructs the absolute step from the slot a receive is posted in: the smallest step
// greater than the previous one that lies in `slot`. Exact while consecutive posts of one
// connection differ by 1..8 steps (NCCL: sliceSteps <= 2 plus rounding to chunkSteps <= 4).
class StepTracker {
 public:
  StepTracker() = default;
  explicit StepTracker(std::uint64_t last) : last_(last) {}  // resume after step `last`
  // Throws nothing; returns std::nullopt for a slot outside 0..kSteps-1.
  [[nodiscard]] std::optional<std::uint64_t> next(int slot) noexcept;
  [[nodiscard]] std::optional<std::uint64_t> last() const noexcept { return last_; }

 private:
  std::optional<std::uint64_t> last_;
};

// What a receive writes: lines whose data is zero, lines whose data is left as it is (flags
// only: "none"), or lines whose data is copied from the same protocol's lines (or raw bytes
// for Simple) of the source.
enum class Fill : std::uint8_t { Zero, FlagsOnly };

// LL: `bytes` of lines at dst (whole lines only; a partial tail line is not touched).
void writeLL(void* dst, std::size_t bytes, std::uint64_t step, Fill fill) noexcept;
// LL: lines at dst carry the data of the LL lines at src (the sender's lines of another step)
// with this step's flags. src and dst may not overlap.
void copyLL(void* dst, const void* src, std::size_t bytes, std::uint64_t step) noexcept;
// LL: packs raw payload (8 bytes a line, low half first; the last line zero-padded) into
// lines of this step; writes ceil(payload_bytes / 8) lines.
void encodeLL(void* dst, const void* payload, std::size_t payload_bytes,
              std::uint64_t step) noexcept;

void writeLL128(void* dst, std::size_t bytes, std::uint64_t step, Fill fill) noexcept;
void copyLL128(void* dst, const void* src, std::size_t bytes, std::uint64_t step) noexcept;

// Writes `bytes` of protocol `p` lines for `step`: Simple copies raw bytes (src) or, for
// src == nullptr, zeroes them (Fill::Zero) or leaves them (Fill::FlagsOnly).
void writeLines(Proto p, void* dst, std::size_t bytes, std::uint64_t step, const void* src,
                Fill fill) noexcept;

}  // namespace crystal::plugin::proto
