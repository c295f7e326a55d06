#include "virtual_data.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

#include "crystal/base/error.h"

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

void MirrorChannel::sendPosted(std::uint64_t k, proto::Proto p, const void* data,
                               std::size_t size) {
  std::lock_guard lock(mu_);
  Entry& e = entries_[k % kDepth];
  e.k = k;
  e.p = p;
  e.live = data;
  e.size = size;
  e.consumed = false;
  e.kept = false;  // keeps e.copy's capacity for the next use of this entry
}

void MirrorChannel::sendDone(std::uint64_t k) {
  std::lock_guard lock(mu_);
  Entry& e = entries_[k % kDepth];
  if (e.k != k || !e.live) return;
  if (has_receiver_ && !e.consumed && e.size > 0) {
    e.copy.resize(e.size);
    std::memcpy(e.copy.data(), e.live, e.size);
    e.kept = true;
    ++kept_;
  }
  e.live = nullptr;
}

bool MirrorChannel::fill(std::uint64_t k, proto::Proto p, void* dst, std::size_t bytes,
                         std::uint64_t step) {
  std::lock_guard lock(mu_);
  Entry& e = entries_[k % kDepth];
  if (e.k != k || e.p != p) return false;
  const void* src = e.live ? e.live : (e.kept ? e.copy.data() : nullptr);
  if (!src) return false;
  const std::size_t n = std::min(bytes, e.size);
  proto::writeLines(p, dst, n, step, src, proto::Fill::Zero);
  // Lines past what the real rank sent still need this step's flags (their data is zero).
  if (n < bytes && p != proto::Proto::Simple)
    proto::writeLines(p, static_cast<char*>(dst) + n, bytes - n, step, nullptr, proto::Fill::Zero);
  e.consumed = true;
  return true;
}

void deliverVirtualData(DataPolicy policy, MirrorChannel* mirror, std::uint64_t k, proto::Proto p,
                        void* dst, std::size_t bytes, std::uint64_t step) {
  if (policy == DataPolicy::Mirror && mirror && mirror->fill(k, p, dst, bytes, step)) return;
  if (p == proto::Proto::Simple) {
    // Zero/none: NCCL's host buffers are zeroed at allocation (and at regMr under zero) and
    // nothing else writes them. Mirror may have left an older step's bytes in this slot.
    if (policy == DataPolicy::Mirror) std::memset(dst, 0, bytes);
    return;
  }
  proto::writeLines(p, dst, bytes, step, nullptr,
                    policy == DataPolicy::None ? proto::Fill::FlagsOnly : proto::Fill::Zero);
}

}  // namespace crystal::plugin
