#include "proxy_ops.h"

#include <atomic>

namespace crystal::profiler {
namespace {

std::atomic<bool (*)()> g_wanted{nullptr};
std::atomic<void (*)(const ProxyOpStart&)> g_started{nullptr};
std::atomic<bool (*)(std::uint64_t)> g_coll_wanted{nullptr};

}  // namespace

void setProxyOpObserver(ProxyOpObserver o) noexcept {
  g_started.store(o.started, std::memory_order_release);
  g_coll_wanted.store(o.coll_wanted, std::memory_order_release);
  g_wanted.store(o.wanted, std::memory_order_release);
}

ProxyOpObserver proxyOpObserver() noexcept {
  return {g_wanted.load(std::memory_order_acquire), g_started.load(std::memory_order_acquire),
          g_coll_wanted.load(std::memory_order_acquire)};
}

}  // namespace crystal::profiler
