#include "proxy_ops.h"

#include <atomic>

namespace crystal::profiler {
namespace {

std::atomic<bool (*)()> g_wanted{nullptr};
std::atomic<void (*)(const ProxyOpStart&)> g_started{nullptr};

}  // namespace

void setProxyOpObserver(ProxyOpObserver o) noexcept {
  g_started.store(o.started, std::memory_order_release);
  g_wanted.store(o.wanted, std::memory_order_release);
}

ProxyOpObserver proxyOpObserver() noexcept {
  return {g_wanted.load(std::memory_order_acquire), g_started.load(std::memory_order_acquire)};
}

}  // namespace crystal::profiler
