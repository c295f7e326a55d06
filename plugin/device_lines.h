// LL / LL128 / Simple writes of a virtual sender into a receive buffer in GPU memory
// (GDR), issued on a DeviceQueue: the same lines proto_lines.h writes with the CPU into host
// buffers, now as async memsets and copies on the plugin's stream.
//
//   LL     flags: one strided 32-bit memset over flag1/flag2 of every 16-byte line
//          (pitch 8 from byte 4); Fill::Zero first zeroes the lines (stream order puts the
//          zero data before the flags).
//   LL128  flags: strided 32-bit memsets over the low and high halves of u64 #15 of every
//          128-byte line (pitch 128); a half-written flag never equals the expected one, so
//          the GPU cannot take a line early. Data first (zero, or a 120-of-128-byte 2D copy
//          of the paired send's lines), flags after, in stream order.
//   Simple raw bytes: zero memset or a device-to-device / host-to-device copy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device_queue.h"
#include "proto_lines.h"

namespace crystal::plugin {

// Lines (or Simple bytes) of protocol p for `step` at dst in device memory, without a source:
// Fill::Zero zeroes data, Fill::FlagsOnly leaves it (LL/LL128 flags only; Simple: nothing).
// `ll128_high_zero`: the LL128 flags' high halves at dst hold 0 already (an earlier write),
// so a flag whose high half is 0 needs one memset, not two.
void writeLinesOnDevice(DeviceQueue& q, proto::Proto p, void* dst, std::size_t bytes,
                        std::uint64_t step, proto::Fill fill, bool ll128_high_zero = false);

// dst (device) gets the data of protocol-p lines at src with this step's flags. src in
// device memory: device-to-device copies (no LL: NCCL keeps LL send buffers in host memory);
// src in host memory: the lines are built in slot's pinned staging by the CPU, then copied
// (LL128: with flag 0, the flags set after the copy).
void copyLinesToDevice(DeviceQueue& q, int slot, proto::Proto p, void* dst, const void* src,
                       bool src_on_device, std::size_t bytes, std::uint64_t step);

}  // namespace crystal::plugin
