#include "device_lines.h"

#include <cstring>

namespace crystal::plugin {
namespace {

using proto::Proto;

constexpr std::size_t kLL128FlagOffset = proto::kLL128FlagWord * 8;  // byte 120 of a line

void flagsLL(DeviceQueue& q, char* d, std::size_t lines, std::uint64_t step) {
  // flag1 at +4 and flag2 at +12 of each 16-byte line: every other 32-bit word from +4.
  q.fill32(d + 4, 8, proto::llFlag(step), 2 * lines);
}

void flagsLL128(DeviceQueue& q, char* d, std::size_t lines, std::uint64_t step, bool high_is_zero) {
  const std::uint64_t f = proto::ll128Flag(step);
  const auto hi = static_cast<std::uint32_t>(f >> 32);
  // Little-endian u64: low half at +120, high half at +124.
  if (hi != 0 || !high_is_zero) q.fill32(d + kLL128FlagOffset + 4, proto::kLL128Line, hi, lines);
  q.fill32(d + kLL128FlagOffset, proto::kLL128Line, static_cast<std::uint32_t>(f), lines);
}

}  // namespace

void writeLinesOnDevice(DeviceQueue& q, Proto p, void* dst, std::size_t bytes, std::uint64_t step,
                        proto::Fill fill, bool ll128_high_zero) {
  auto* d = static_cast<char*>(dst);
  const bool zero = fill == proto::Fill::Zero;
  switch (p) {
    case Proto::LL: {
      const std::size_t lines = bytes / proto::kLLLine;
      if (zero) q.zero(d, lines * proto::kLLLine);
      flagsLL(q, d, lines, step);
      return;
    }
    case Proto::LL128: {
      const std::size_t lines = bytes / proto::kLL128Line;
      if (zero) q.zero(d, lines * proto::kLL128Line);
      flagsLL128(q, d, lines, step, zero || ll128_high_zero);
      return;
    }
    case Proto::Simple:
      if (zero) q.zero(d, bytes);
      return;
  }
}

void copyLinesToDevice(DeviceQueue& q, int slot, Proto p, void* dst, const void* src,
                       bool src_on_device, std::size_t bytes, std::uint64_t step) {
  auto* d = static_cast<char*>(dst);
  if (!src_on_device) {
    // The CPU builds the lines (new flags) in pinned staging; one copy puts them in place.
    std::byte* image = q.staging(slot, bytes);
    proto::writeLines(p, image, bytes, step, src, proto::Fill::Zero);
    if (p == Proto::LL128) {
      // A copy engine need not write a 128-byte line in order: copy the lines with flag 0
      // (never valid), then set the flags, so no flag lands before its line's data.
      const std::size_t lines = bytes / proto::kLL128Line;
      for (std::size_t i = 0; i < lines; ++i)
        std::memset(image + i * proto::kLL128Line + kLL128FlagOffset, 0, 8);
      q.hostToDevice(d, image, bytes);
      flagsLL128(q, d, lines, step, false);
      return;
    }
    // LL: each 8-byte data/flag pair is written whole (the PCIe write atomicity NCCL's own
    // GDR LL relies on).
    q.hostToDevice(d, image, bytes);
    return;
  }
  switch (p) {
    case Proto::Simple:
      q.deviceToDevice(d, src, bytes);
      return;
    case Proto::LL128: {
      const std::size_t lines = bytes / proto::kLL128Line;
      // 120 data bytes of each line; the sender's flags are not copied (they may equal
      // the flag this receive waits for before the data has landed).
      q.deviceToDevice2D(d, src, proto::kLL128Line, kLL128FlagOffset, lines);
      flagsLL128(q, d, lines, step, false);
      return;
    }
    case Proto::LL:
      // Not produced by NCCL (LL send buffers stay in host memory); valid lines anyway.
      writeLinesOnDevice(q, p, d, bytes, step, proto::Fill::Zero);
      return;
  }
}

}  // namespace crystal::plugin
