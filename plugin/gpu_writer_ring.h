// The command ring between the plugin (CPU) and its GPU-writer kernel (GPU), shared by
// plugin/gpu_writer.cc and plugin/gpu_writer_kernel.cu. It lies in pinned, device-mapped
// host memory: the CPU posts commands with plain stores, the kernel polls them over PCIe.
//
// Protocol (docs/plugin.md "GPU writer"):
//   CPU post: fill the command's fields, then its `seq` (x86 keeps the order), full fence,
//     read `state`; not kRunning -> set kRunning and launch a kernel (stream-ordered after
//     any that is still finishing).
//   Kernel: state = kRunning, next = done + 1; poll the sequence numbers of the next 32
//     commands; run the consecutive ones that are there, in order (kFill: every thread stores
//     `value` at dst + i * pitch, i < count; kCopy: the blocks copy `count` bytes from `arg`
//     to dst), fence (a system-wide one after copies: the CPU reads `done` and then lets
//     NCCL's kernel read the bytes), then done = the last of them. The stores of one batch
//     are not ordered against each other (an LL128 line's flag must not follow its data in
//     the same batch), except kRelease's: after every copy of the batch, fenced. A batch's
//     copies of more than one chunk are shared with the kernel's other blocks
//     (gpu_writer_kernel.cu, "Team"); `done` waits for all of them. After
//     `idle` ns without one: state = kExiting, system fence, look once more; a command there ->
//     state = kRunning, go on; else return.
//   Both sides store, fence, then load the other's word (Dekker): either the kernel sees the
//   new command or the CPU sees kExiting and launches another kernel. Redundant launches
//   are harmless (one exits after `idle`).
#pragma once

#include <cstdint>

namespace crystal::plugin::writer_ring {

inline constexpr std::uint32_t kSize = 1024;  // commands in flight at most
inline constexpr std::uint32_t kRunning = 1, kExiting = 2;

enum Kind : std::uint32_t {
  kFill = 0,  // 32-bit words of one value at a pitch (LL/LL128 flags)
  kCopy = 1,  // bytes from one device address to another (a real peer's step)
  // After every earlier command ran and a system-wide fence: the 64-bit `arg` stored at
  // `dst`, a device address of host memory (a real sender reads it: its step was copied).
  kRelease = 2,
};

struct Command {  // 32 bytes
  std::uint64_t dst;    // device address: the first word (kFill), the first byte (kCopy)
  std::uint64_t arg;    // kFill: fillArg(pitch, value); kCopy: the source's device address;
                        // kRelease: the value
  std::uint32_t count;  // kFill: words; kCopy: bytes
  std::uint32_t kind;   // Kind
  std::uint64_t seq;  // written last; the command is there once seq equals its number
};
static_assert(sizeof(Command) == 32);

// kFill's arg: the bytes between consecutive words (low half) and the value (high half)
// (the host's helpers; the kernel splits it itself).
constexpr std::uint64_t fillArg(std::uint32_t pitch, std::uint32_t value) {
  return std::uint64_t{pitch} | std::uint64_t{value} << 32;
}
constexpr std::uint32_t fillPitch(std::uint64_t arg) { return static_cast<std::uint32_t>(arg); }
constexpr std::uint32_t fillValue(std::uint64_t arg) {
  return static_cast<std::uint32_t>(arg >> 32);
}

struct Ring {
  std::uint32_t state;  // kRunning / kExiting (0 before the first launch)
  std::uint32_t stop;   // set by the CPU at close (the kernel returns after `idle` anyway)
  std::uint64_t done;   // number of the last command the kernel ran (commands count from 1)
  std::uint64_t starts;  // kernels that started (the kernel counts itself; diagnostics)
  std::uint64_t pad[5];
  Command cmds[kSize];
};
static_assert(sizeof(Ring) == 64 + 32 * kSize);

}  // namespace crystal::plugin::writer_ring
