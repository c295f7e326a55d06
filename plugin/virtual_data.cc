#include "virtual_data.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "crystal/base/error.h"
#include "device_lines.h"

namespace crystal::plugin {

const char* dataPolicyName(DataPolicy p) noexcept {
  switch (p) {
    case DataPolicy::Mirror:
      return "mirror";
    case DataPolicy::Zero:
      return "zero";
    case DataPolicy::None:
      return "none";
  }
  return "?";
}

DataPolicy parseDataPolicy(const std::string& value, const std::string& where) {
  if (value == "mirror") return DataPolicy::Mirror;
  if (value == "zero") return DataPolicy::Zero;
  if (value == "none") return DataPolicy::None;
  throw InputError(fmt::format("{}='{}': must be mirror, zero or none", where, value));
}

proto::Proto protoOfRegion(int ordinal, int protocol_buffers) noexcept {
  if (ordinal < 0 || ordinal >= protocol_buffers) return proto::Proto::Simple;
  if (protocol_buffers >= 3) return static_cast<proto::Proto>(ordinal);
  if (protocol_buffers == 2) return ordinal == 0 ? proto::Proto::LL : proto::Proto::Simple;
  return proto::Proto::Simple;
}

MirrorChannel::~MirrorChannel() {
  auto destroy = [](Entry& e) {
    if (!e.read) return;
    try {
      (void)cuda::driver().eventDestroy(e.read);
    } catch (...) {  // teardown: nothing to report to
    }
  };
  for (Entry& e : entries_) destroy(e);
  for (Entry& e : sources_) destroy(e);
}

MirrorChannel::Entry* MirrorChannel::find(std::uint64_t k) {
  return const_cast<Entry*>(std::as_const(*this).find(k));
}

const MirrorChannel::Entry* MirrorChannel::find(std::uint64_t k) const {
  const Entry& e = entries_[k % kDepth];
  if (e.k == k) return &e;
  for (const Entry& s : sources_)
    if (s.k == k) return &s;
  return nullptr;
}

void MirrorChannel::sendPosted(std::uint64_t k, proto::Proto p, const void* data,
                               std::size_t size, bool on_device, bool source) {
  std::lock_guard lock(mu_);
  Entry& e = source ? sources_[next_source_++ % kSources] : entries_[k % kDepth];
  e.k = k;
  e.p = p;
  e.live = data;
  e.size = size;
  e.consumed = false;
  e.source = source;
  e.kept = false;  // keeps e.copy's capacity for the next use of this entry
  e.on_device = on_device;
  e.read_pending = false;
}

bool MirrorChannel::sendDone(std::uint64_t k) {
  std::lock_guard lock(mu_);
  Entry* found = find(k);
  if (!found) return true;
  Entry& e = *found;
  if (e.read_pending) {
    const cuda::Result rc = cuda::driver().eventQuery(e.read);
    if (rc == cuda::kNotReady) return false;
    cuda::check(rc, "cuEventQuery (mirror copy of a GPU send buffer)");
    e.read_pending = false;
  }
  if (!e.live) return true;
  if (has_receiver_ && (!e.consumed || e.source) && e.size > 0 && !e.on_device) {
    e.copy.resize(e.size);
    std::memcpy(e.copy.data(), e.live, e.size);
    e.kept = true;
    ++kept_;
  }
  e.live = nullptr;
  return true;
}

DataWritten MirrorChannel::fill(std::uint64_t k, proto::Proto p, void* dst, std::size_t bytes,
                                std::uint64_t step, Placed* placed) {
  std::lock_guard lock(mu_);
  Entry* found = find(k);
  if (!found) return DataWritten::NotSent;
  Entry& e = *found;
  if (e.p != p) return DataWritten::OtherProto;
  const std::size_t n = std::min(bytes, e.size);
  if (n > 0) {
    const void* src = e.live ? e.live : (e.kept ? e.copy.data() : nullptr);
    if (!src || (e.on_device && e.live)) return DataWritten::NotKept;
    if (placed && placed->k == k && placed->n == n && placed->at == dst) {
      // dst holds these bytes already (an all-gather's slot gets the same source each loop):
      // Simple copies nothing, LL/LL128 lines only need this step's flags.
      ++skipped_;
      if (p != proto::Proto::Simple)
        proto::writeLines(p, dst, n, step, nullptr, proto::Fill::FlagsOnly);
    } else {
      proto::writeLines(p, dst, n, step, src, proto::Fill::Zero);
    }
  }
  // Lines past what the real rank sent still need this step's flags (their data is zero).
  if (n < bytes && p != proto::Proto::Simple)
    proto::writeLines(p, static_cast<char*>(dst) + n, bytes - n, step, nullptr, proto::Fill::Zero);
  if (placed) *placed = {k, n, dst};
  e.consumed = true;
  return DataWritten::Mirrored;
}

DataWritten MirrorChannel::fillDevice(std::uint64_t k, proto::Proto p, void* dst,
                                      std::size_t bytes, std::uint64_t step, DeviceQueue& q,
                                      int slot) {
  std::lock_guard lock(mu_);
  Entry* found = find(k);
  if (!found) return DataWritten::NotSent;
  Entry& e = *found;
  if (e.p != p) return DataWritten::OtherProto;
  const bool live_on_device = e.live && e.on_device;
  const std::size_t n = std::min(bytes, e.size);
  if (n > 0) {
    const void* src = e.live ? e.live : (e.kept ? e.copy.data() : nullptr);
    if (!src) return DataWritten::NotKept;
    copyLinesToDevice(q, slot, p, dst, src, live_on_device, n, step);
  }
  if (n < bytes && p != proto::Proto::Simple) {
    // Past what the real rank sent: zero data, this step's flags.
    writeLinesOnDevice(q, p, static_cast<char*>(dst) + n, bytes - n, step, proto::Fill::Zero);
  }
  if (live_on_device && n > 0) {
    q.record(e.read);  // the send completes only after this copy read its buffer
    e.read_pending = true;
  }
  e.consumed = true;
  return DataWritten::Mirrored;
}

namespace {

// Mirror: what fill() said, or Unpaired without a channel to ask.
template <class Fill>
DataWritten mirrorOutcome(DataPolicy policy, MirrorChannel* mirror, const Fill& fill) {
  if (policy != DataPolicy::Mirror) return DataWritten::Nothing;
  return mirror ? fill(*mirror) : DataWritten::Unpaired;
}

}  // namespace

DataWritten deliverVirtualData(DataPolicy policy, MirrorChannel* mirror, std::uint64_t k,
                               proto::Proto p, void* dst, std::size_t bytes, std::uint64_t step,
                               MirrorChannel::Placed* placed) {
  const DataWritten m = mirrorOutcome(policy, mirror, [&](MirrorChannel& c) {
    return c.fill(k, p, dst, bytes, step, placed);
  });
  if (m == DataWritten::Mirrored) return m;
  if (p == proto::Proto::Simple) {
    // Zero/none: NCCL's host buffers are zeroed at allocation (and at regMr under zero) and
    // nothing else writes them. Mirror may have left an older step's bytes in this slot.
    if (policy == DataPolicy::Mirror) std::memset(dst, 0, bytes);
    return m;
  }
  proto::writeLines(p, dst, bytes, step, nullptr,
                    policy == DataPolicy::None ? proto::Fill::FlagsOnly : proto::Fill::Zero);
  return policy == DataPolicy::Mirror ? m : DataWritten::PolicyLines;
}

DataWritten deliverVirtualDataOnDevice(DataPolicy policy, MirrorChannel* mirror, std::uint64_t k,
                                       proto::Proto p, void* dst, std::size_t bytes,
                                       std::uint64_t step, DeviceQueue& q, int slot,
                                       bool ll128_high_zero) {
  const DataWritten m = mirrorOutcome(policy, mirror, [&](MirrorChannel& c) {
    return c.fillDevice(k, p, dst, bytes, step, q, slot);
  });
  if (m == DataWritten::Mirrored) return m;
  if (p == proto::Proto::Simple) {
    // Mirror may have left an older step's bytes in this slot; zero/none: see the header.
    if (policy == DataPolicy::Mirror) q.zero(dst, bytes);
    return m;
  }
  writeLinesOnDevice(q, p, dst, bytes, step,
                     policy == DataPolicy::None ? proto::Fill::FlagsOnly : proto::Fill::Zero,
                     ll128_high_zero);
  return policy == DataPolicy::Mirror ? m : DataWritten::PolicyLines;
}

}  // namespace crystal::plugin
