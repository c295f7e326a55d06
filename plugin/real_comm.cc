#include "real_comm.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

#include "crystal/base/log.h"
#include "errors.h"
#include "proto_lines.h"
#include "virtual_data.h"

namespace crystal::plugin {

void RealSendComm::registered(const MemRegion& region) {
  if (region.type != nccl::NCCL_PTR_CUDA || region.size == 0) return;
  if (!gpu_) gpu_ = std::make_unique<DeviceQueue>(static_cast<int>(capacity()));
  (void)gpu_->twin(region.base, region.size);
}

void RealSendComm::isend(Request& r, void* data, std::size_t size, int tag, live::TimeNs now) {
  r.n = 1;
  r.data[0] = data;
  r.sizes[0] = size;
  r.tags[0] = tag;
  r.posted = now;
  r.bytes = size;
  r.step = steps_++;
  r.due = port_->reserve(now, link_.occupancy(size)) + link_.latency_ns;
  const MemRegion* region = size > 0 ? regionOf(data) : nullptr;
  if (region && region->type == nccl::NCCL_PTR_CUDA) {
    if (!gpu_) gpu_ = std::make_unique<DeviceQueue>(static_cast<int>(capacity()));
    const int s = slotOf(r);
    gpu_->deviceToHost(stagingOf(data, size), data, size);
    gpu_->mark(s);
    r.on_device[0] = r.staged = true;
  }
  queue_.push_back(slotOf(r));
  progress();
}

void RealSendComm::progress() {
  while (!queue_.empty()) {
    const int s = queue_.front();
    Request& r = *slot(s);
    // A GPU buffer: its bytes leave from the staging copy once that copy is done.
    if (r.staged && !gpu_->done(s)) return;
    const char* body = r.staged ? reinterpret_cast<const char*>(stagingOf(r.data[0], r.sizes[0]))
                                : static_cast<const char*>(r.data[0]);
    if (hdr_done_ == 0 && body_done_ == 0) {
      hdr_ = FrameHeader{};
      hdr_.tag = r.tags[0];
      hdr_.size = r.sizes[0];
      hdr_.due_ns = r.due;
    }
    while (hdr_done_ < sizeof hdr_) {
      const std::size_t n = sendSome(fd_.get(), reinterpret_cast<const char*>(&hdr_) + hdr_done_,
                                     sizeof hdr_ - hdr_done_);
      if (n == 0) return;
      hdr_done_ += n;
    }
    while (body_done_ < r.sizes[0]) {
      const std::size_t n = sendSome(fd_.get(), body + body_done_, r.sizes[0] - body_done_);
      if (n == 0) return;
      body_done_ += n;
    }
    r.filled[0] = true;
    hdr_done_ = body_done_ = 0;
    queue_.pop_front();
  }
}

std::byte* RealSendComm::stagingOf(const void* data, std::size_t size) {
  const MemRegion* region = regionOf(data);
  if (!region || region->type != nccl::NCCL_PTR_CUDA)
    throw PluginError(Errc::BadUsage, "isend: GPU buffer is no longer registered on this comm");
  const auto off = static_cast<std::size_t>(static_cast<const std::byte*>(data) -
                                            static_cast<const std::byte*>(region->base));
  (void)size;  // within the region: checked at isend (checkRange)
  return gpu_->twin(region->base, region->size) + off;
}

void RealSendComm::warnIfStalled(const Request& r, live::TimeNs now) {
  if (stall_warned_ || now - r.posted < stall_ns_) return;
  stall_warned_ = true;  // once per comm: the log must stay readable in a long stall
  const char* what = r.staged && !r.filled[0] && !gpu_->done(slotOf(r))
                         ? "its device-to-host staging copy (the GPU has not run it)"
                     : !r.filled[0] ? "the real peer to read the bytes (TCP send blocked: the "
                                      "peer's proxy does not post or progress a receive)"
                                    : "its modelled delivery time";
  CRYSTAL_WARN(
      "send to {} (net dev {}): step {} ({} bytes, tag {}) has waited {:.1f} s (> the "
      "emulation timeout) for {}; still waiting",
      peer_, dev(), r.step, r.sizes[0], r.tags[0], static_cast<double>(now - r.posted) / 1e9, what);
}

bool RealSendComm::test(Request& r, live::TimeNs now, int* sizes) {
  if (!r.filled[0]) progress();
  if (!r.filled[0] || now < r.due) {
    warnIfStalled(r, now);
    return false;
  }
  if (sizes) sizes[0] = static_cast<int>(r.sizes[0]);
  return true;
}

void RealRecvComm::registered(const MemRegion& region) {
  if (region.type == nccl::NCCL_PTR_CUDA && region.size > 0)
    (void)gpu().twin(region.base, region.size);
}

void RealRecvComm::irecv(Request& r, int n, void** data, const std::size_t* sizes, const int* tags,
                         live::TimeNs now) {
  r.n = n;
  for (int i = 0; i < n; ++i) {
    r.data[i] = data[i];
    r.sizes[i] = sizes[i];
    r.tags[i] = tags ? tags[i] : 0;
    r.bytes += sizes[i];
    const MemRegion* region = sizes[i] > 0 ? regionOf(data[i]) : nullptr;
    r.on_device[i] = region && region->type == nccl::NCCL_PTR_CUDA;
  }
  r.posted = now;
  r.due = 0;
  r.step = steps_++;
  if (protocol_buffers_ < 0) protocol_buffers_ = std::min(3, registrations());
  posted_.push_back(slotOf(r));
  progress(now);
}

void RealRecvComm::progress(live::TimeNs now) {
  for (;;) {
    // Read only what a posted receive still waits for: the peer may have sent everything
    // and closed, and an end of stream is an error only if we still need bytes.
    if (hdr_done_ == 0 && target_slot_ < 0) {
      bool waiting = false;
      for (int s : posted_) {
        const Request& r = *slot(s);
        for (int i = 0; i < r.n; ++i) waiting = waiting || !r.filled[i];
      }
      if (!waiting) return;
    }
    while (hdr_done_ < sizeof hdr_) {
      const std::size_t n =
          recvSome(fd_.get(), reinterpret_cast<char*>(&hdr_) + hdr_done_, sizeof hdr_ - hdr_done_);
      if (n == 0) return;
      hdr_done_ += n;
    }
    if (hdr_.magic != FrameHeader{}.magic)
      throw PluginError(Errc::Remote, "real peer sent a corrupt frame header");
    if (target_slot_ < 0) {
      // Oldest posted entry with this tag that is still empty.
      for (int s : posted_) {
        Request& r = *slot(s);
        for (int i = 0; i < r.n && target_slot_ < 0; ++i)
          if (!r.filled[i] && r.tags[i] == hdr_.tag) {
            target_slot_ = s;
            target_entry_ = i;
          }
        if (target_slot_ >= 0) break;
      }
      if (target_slot_ < 0) return;  // wait for NCCL to post a matching receive
      const Request& r = *slot(target_slot_);
      if (hdr_.size > r.sizes[target_entry_])
        throw PluginError(Errc::Remote,
                          fmt::format("real peer sent {} bytes with tag {} into a {}-byte receive",
                                      hdr_.size, hdr_.tag, r.sizes[target_entry_]));
    }
    Request& r = *slot(target_slot_);
    const bool staged = r.on_device[target_entry_];
    char* dst = staged ? reinterpret_cast<char*>(stagingOf(r.data[target_entry_], hdr_.size))
                       : static_cast<char*>(r.data[target_entry_]);
    while (body_done_ < hdr_.size) {
      const std::size_t n = recvSome(fd_.get(), dst + body_done_, hdr_.size - body_done_);
      if (n == 0) return;
      body_done_ += n;
    }
    if (staged) {
      // The GPU buffer gets the bytes by async copies; the request waits for its event.
      copyToDevice(r, target_entry_, dst, hdr_.size);
      gpu().mark(target_slot_ * kMaxGroup);
      r.staged = true;
    }
    r.filled[target_entry_] = true;
    r.got[target_entry_] = hdr_.size;
    // Released no earlier than the target would have delivered it.
    const live::TimeNs due =
        shared_clock_ ? hdr_.due_ns : r.posted + link_.occupancy(hdr_.size) + link_.latency_ns;
    r.due = std::max({r.due, due, now});
    hdr_done_ = body_done_ = 0;
    target_slot_ = target_entry_ = -1;
  }
}

bool RealRecvComm::test(Request& r, live::TimeNs now, int* sizes) {
  const bool all = [&] {
    for (int i = 0; i < r.n; ++i)
      if (!r.filled[i]) return false;
    return true;
  }();
  if (!all) {
    progress(now);
    for (int i = 0; i < r.n; ++i)
      if (!r.filled[i]) {
        warnIfStalled(r, now, "bytes from the real peer");
        return false;
      }
  }
  if (r.staged && !gpu_->done(slotOf(r) * kMaxGroup)) {
    warnIfStalled(r, now, "the host-to-device copy of its staged bytes (the GPU has not run it)");
    return false;
  }
  if (now < r.due) {
    warnIfStalled(r, now, "its modelled delivery time");
    return false;
  }
  if (sizes)
    for (int i = 0; i < r.n; ++i) sizes[i] = static_cast<int>(r.got[i]);
  posted_.erase(std::find(posted_.begin(), posted_.end(), slotOf(r)));
  return true;
}

std::byte* RealRecvComm::stagingOf(const void* data, std::size_t size) {
  const MemRegion* region = regionOf(data);
  if (!region || region->type != nccl::NCCL_PTR_CUDA)
    throw PluginError(Errc::BadUsage, "irecv: GPU buffer is no longer registered on this comm");
  const auto off = static_cast<std::size_t>(static_cast<const std::byte*>(data) -
                                            static_cast<const std::byte*>(region->base));
  if (off + size > region->size)
    throw PluginError(Errc::Remote,
                      fmt::format("real peer sent {} bytes past the end of a {}-byte GPU region",
                                  size, region->size));
  return gpu().twin(region->base, region->size) + off;
}

void RealRecvComm::copyToDevice(const Request& r, int entry, char* staged, std::size_t bytes) {
  void* dst = r.data[entry];
  const MemRegion* region = regionOf(dst);
  const std::size_t lines = bytes / proto::kLL128Line;
  if (!region || protoOfRegion(region->ordinal, protocol_buffers_) != proto::Proto::LL128 ||
      lines == 0) {
    gpu().hostToDevice(dst, staged, bytes);
    return;
  }
  // Every line of one step carries the same flag (the sender's step); a step whose lines
  // disagree is copied as it came (then it is the sender's own inconsistency).
  constexpr std::size_t kFlag = proto::kLL128FlagWord * 8;
  std::uint64_t flag = 0;
  std::memcpy(&flag, staged + kFlag, 8);
  for (std::size_t i = 1; i < lines; ++i)
    if (std::memcmp(staged + i * proto::kLL128Line + kFlag, &flag, 8) != 0) {
      gpu().hostToDevice(dst, staged, bytes);
      return;
    }
  for (std::size_t i = 0; i < lines; ++i) std::memset(staged + i * proto::kLL128Line + kFlag, 0, 8);
  gpu().hostToDevice(dst, staged, bytes);
  // Little-endian u64: high half at +124 first, then the low half at +120.
  char* d = static_cast<char*>(dst);
  gpu().fill32(d + kFlag + 4, proto::kLL128Line, static_cast<std::uint32_t>(flag >> 32), lines);
  gpu().fill32(d + kFlag, proto::kLL128Line, static_cast<std::uint32_t>(flag), lines);
}

void RealRecvComm::warnIfStalled(const Request& r, live::TimeNs now, const char* what) {
  if (stall_warned_ || now - r.posted < stall_ns_) return;
  stall_warned_ = true;  // once per comm: the log must stay readable in a long stall
  std::string need;
  for (int i = 0; i < r.n; ++i)
    if (!r.filled[i])
      need +=
          fmt::format("{}tag {} (<= {} bytes)", need.empty() ? "" : ", ", r.tags[i], r.sizes[i]);
  std::string stream;
  if (hdr_done_ > 0 && hdr_done_ < sizeof hdr_)
    stream = fmt::format("; a frame header is half read ({} of {} bytes)", hdr_done_, sizeof hdr_);
  else if (hdr_done_ == sizeof hdr_ && target_slot_ < 0)
    stream = fmt::format("; the peer's next frame (tag {}, {} bytes) matches no posted receive",
                         hdr_.tag, hdr_.size);
  else if (hdr_done_ == sizeof hdr_)
    stream = fmt::format("; {} of {} body bytes of the frame with tag {} arrived", body_done_,
                         hdr_.size, hdr_.tag);
  CRYSTAL_WARN(
      "receive from {} (net dev {}): step {} ({} entries{}{}) has waited {:.1f} s (> the "
      "emulation timeout) for {}{}; still waiting (legit only if the peer is idle)",
      peer_, dev(), r.step, r.n, need.empty() ? "" : ", missing ", need,
      static_cast<double>(now - r.posted) / 1e9, what, stream);
}

DeviceQueue& RealRecvComm::gpu() {
  if (!gpu_) gpu_ = std::make_unique<DeviceQueue>(static_cast<int>(capacity()) * kMaxGroup);
  return *gpu_;
}

}  // namespace crystal::plugin
