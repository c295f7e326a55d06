#include "proto_lines.h"

#include <atomic>
#include <cstring>

namespace crystal::plugin::proto {
namespace {

// One aligned 8-byte store the compiler may not split or merge with its neighbours' order.
inline void store64(void* p, std::uint64_t v) noexcept {
  __atomic_store_n(static_cast<std::uint64_t*>(p), v, __ATOMIC_RELAXED);
}

inline std::uint64_t load64(const void* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// {u32 data, u32 flag} as one little-endian u64 (data at the lower address).
inline std::uint64_t llHalf(std::uint32_t data, std::uint32_t flag) noexcept {
  return static_cast<std::uint64_t>(data) | (static_cast<std::uint64_t>(flag) << 32);
}

}  // namespace

std::optional<std::uint64_t> StepTracker::next(int slot) noexcept {
  if (slot < 0 || slot >= kSteps) return std::nullopt;
  const auto s = static_cast<std::uint64_t>(slot);
  std::uint64_t step = s;
  if (last_) {
    const std::uint64_t after = *last_ + 1;
    // Smallest value >= after that is congruent to slot modulo kSteps.
    step = after + ((s + kSteps - after % kSteps) % kSteps);
  }
  last_ = step;
  return step;
}

void writeLL(void* dst, std::size_t bytes, std::uint64_t step, Fill fill) noexcept {
  auto* d = static_cast<char*>(dst);
  const std::uint32_t f = llFlag(step);
  const std::size_t lines = bytes / kLLLine;
  if (fill == Fill::Zero) {
    const std::uint64_t half = llHalf(0, f);
    for (std::size_t i = 0; i < lines; ++i, d += kLLLine) {
      store64(d, half);
      store64(d + 8, half);
    }
    return;
  }
  // Flags only: the data words are undefined by contract, so plain 4-byte flag stores do.
  for (std::size_t i = 0; i < lines; ++i, d += kLLLine) {
    __atomic_store_n(reinterpret_cast<std::uint32_t*>(d + 4), f, __ATOMIC_RELAXED);
    __atomic_store_n(reinterpret_cast<std::uint32_t*>(d + 12), f, __ATOMIC_RELAXED);
  }
}

void copyLL(void* dst, const void* src, std::size_t bytes, std::uint64_t step) noexcept {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const std::uint32_t f = llFlag(step);
  for (std::size_t i = 0; i < bytes / kLLLine; ++i, d += kLLLine, s += kLLLine) {
    store64(d, llHalf(static_cast<std::uint32_t>(load64(s)), f));
    store64(d + 8, llHalf(static_cast<std::uint32_t>(load64(s + 8)), f));
  }
}

void encodeLL(void* dst, const void* payload, std::size_t payload_bytes,
              std::uint64_t step) noexcept {
  auto* d = static_cast<char*>(dst);
  const auto* p = static_cast<const unsigned char*>(payload);
  const std::uint32_t f = llFlag(step);
  for (std::size_t off = 0; off < payload_bytes; off += 8, d += kLLLine) {
    std::uint64_t v = 0;
    std::memcpy(&v, p + off, payload_bytes - off < 8 ? payload_bytes - off : 8);
    store64(d, llHalf(static_cast<std::uint32_t>(v), f));
    store64(d + 8, llHalf(static_cast<std::uint32_t>(v >> 32), f));
  }
}

namespace {
constexpr std::size_t kLL128Data = kLL128FlagWord * 8;  // 120 bytes of data per line

void ll128Flags(char* d, std::size_t lines, std::uint64_t step) noexcept {
  // Data of every line is globally visible before any flag (x86: stores stay in order; the
  // fence keeps the compiler and weaker CPUs from reordering the two passes).
  std::atomic_thread_fence(std::memory_order_release);
  const std::uint64_t f = ll128Flag(step);
  for (std::size_t i = 0; i < lines; ++i, d += kLL128Line) store64(d + kLL128Data, f);
}
}  // namespace

void writeLL128(void* dst, std::size_t bytes, std::uint64_t step, Fill fill) noexcept {
  auto* d = static_cast<char*>(dst);
  const std::size_t lines = bytes / kLL128Line;
  // Zero: one memset over whole lines (old flags become 0, never a valid flag: steps + 1 >= 1),
  // then this step's flags.
  if (fill == Fill::Zero) std::memset(d, 0, lines * kLL128Line);
  ll128Flags(d, lines, step);
}

void copyLL128(void* dst, const void* src, std::size_t bytes, std::uint64_t step) noexcept {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const std::size_t lines = bytes / kLL128Line;
  for (std::size_t i = 0; i < lines; ++i)
    std::memcpy(d + i * kLL128Line, s + i * kLL128Line, kLL128Data);
  ll128Flags(d, lines, step);
}

void writeLines(Proto p, void* dst, std::size_t bytes, std::uint64_t step, const void* src,
                Fill fill) noexcept {
  switch (p) {
    case Proto::LL:
      if (src)
        copyLL(dst, src, bytes, step);
      else
        writeLL(dst, bytes, step, fill);
      return;
    case Proto::LL128:
      if (src)
        copyLL128(dst, src, bytes, step);
      else
        writeLL128(dst, bytes, step, fill);
      return;
    case Proto::Simple:
      if (src)
        std::memcpy(dst, src, bytes);
      else if (fill == Fill::Zero)
        std::memset(dst, 0, bytes);
      return;
  }
}

}  // namespace crystal::plugin::proto
