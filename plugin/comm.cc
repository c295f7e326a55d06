#include "comm.h"

#include <fmt/core.h>

#include <algorithm>

#include "errors.h"

namespace crystal::plugin {

DataComm::DataComm(CommKind kind, NetContext* ctx, int dev, int max_requests)
    : Comm(kind, ctx, dev), pool_(static_cast<std::size_t>(max_requests)) {}

void* DataComm::regMr(void* data, std::size_t size, int type) {
  if (type != nccl::NCCL_PTR_HOST && type != nccl::NCCL_PTR_CUDA)
    throw PluginError(Errc::BadArgument, fmt::format("regMr: unsupported pointer type {}", type));
  auto r = std::make_unique<MemRegion>(MemRegion{data, size, type, registrations_});
  registered(*r);  // may throw: then nothing is registered
  ++registrations_;
  regions_.push_back(std::move(r));
  return regions_.back().get();
}

void DataComm::deregMr(void* mhandle) {
  auto it = std::find_if(regions_.begin(), regions_.end(),
                         [&](const auto& r) { return r.get() == mhandle; });
  if (it == regions_.end())
    throw PluginError(Errc::BadUsage, "deregMr: handle was not registered on this comm");
  regions_.erase(it);
}

void DataComm::checkRange(void* mhandle, const void* data, std::size_t size) const {
  for (const auto& r : regions_) {
    if (r.get() != mhandle) continue;
    const auto* b = static_cast<const char*>(r->base);
    const auto* d = static_cast<const char*>(data);
    if (d < b || d + size > b + r->size)
      throw PluginError(Errc::BadArgument,
                        fmt::format("{} bytes at {} lie outside the registered region {}+{}", size,
                                    data, r->base, r->size));
    return;
  }
  throw PluginError(Errc::BadArgument, "memory handle not registered on this comm");
}

const MemRegion* DataComm::regionOf(const void* p) const noexcept {
  const auto* d = static_cast<const char*>(p);
  for (const auto& r : regions_) {
    const auto* b = static_cast<const char*>(r->base);
    if (d >= b && d < b + r->size) return r.get();
  }
  return nullptr;
}

Request* DataComm::allocRequest() noexcept {
  if (outstanding_ >= static_cast<int>(pool_.size())) return nullptr;
  for (auto& r : pool_) {
    if (r.in_use) continue;
    r = Request{};
    r.in_use = true;
    r.seq = next_seq_++;
    ++outstanding_;
    return &r;
  }
  return nullptr;
}

void DataComm::isend(Request&, void*, std::size_t, int, live::TimeNs) {
  throw PluginError(Errc::BadUsage, "isend on a receive comm");
}

void DataComm::irecv(Request&, int, void**, const std::size_t*, const int*, live::TimeNs) {
  throw PluginError(Errc::BadUsage, "irecv on a send comm");
}

}  // namespace crystal::plugin
