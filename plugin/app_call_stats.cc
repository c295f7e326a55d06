#include "app_call_stats.h"

#include <fmt/core.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "crystal/base/log.h"
#include "params.h"

namespace crystal::plugin {
namespace {

std::atomic<int> g_on{-1};  // -1: CRYSTAL_HOST_STATS not read yet

// The thread's record as its last operation ended (AppOperation).
AppCallStats& atLastOperation() noexcept {
  thread_local AppCallStats s;
  return s;
}

double us(std::int64_t ns, std::int64_t n) {
  return n > 0 ? static_cast<double>(ns) / 1e3 / static_cast<double>(n) : 0.0;
}

}  // namespace

bool appCallStatsOn() noexcept {
  int on = g_on.load(std::memory_order_relaxed);
  if (on < 0) {
    try {
      on = paramBool("CRYSTAL_HOST_STATS") ? 1 : 0;
    } catch (...) {
      on = 0;
    }
    g_on.store(on, std::memory_order_relaxed);
  }
  return on != 0;
}

void setAppCallStatsForTesting(bool on) noexcept {
  g_on.store(on ? 1 : 0, std::memory_order_relaxed);
  appCallStats() = {};
  atLastOperation() = {};
}

AppCallStats& appCallStats() noexcept {
  thread_local AppCallStats s;
  return s;
}

AppOperation::~AppOperation() {
  if (!on_) return;
  AppCallStats& s = appCallStats();
  AppCallStats& last = atLastOperation();
  const std::int64_t ns = s.call_ns + s.group_end_ns - last.call_ns - last.group_end_ns;
  if (ns > kSetUpNs) {
    last.set_up_ops += 1;
    last.set_up_ns += ns;
    s = last;
  }
  last = s;
}

std::string describeAppCallStats(const AppCallStats& s) {
  const std::int64_t ops = s.ungrouped + s.group_ends;
  if (s.calls == 0 && s.group_ends == 0 && s.set_up_ops == 0) return {};
  const std::int64_t total = s.call_ns + s.group_end_ns;
  const std::int64_t nccl = s.call_nccl_ns + s.group_end_nccl_ns;
  const std::int64_t ours_in_nccl = s.tuner_ns + s.profiler_ns;
  return fmt::format(
             "{} operations ({} calls, {} of them grouped; {} group ends): {:.2f} us each on the "
             "host, of which NCCL {:.2f} us (its own {:.2f}, the tuner {:.2f} in {} calls, the "
             "profiler {:.2f} in {} events), P2P pacing {:.2f} us, the interposer's other work "
             "{:.2f} us",
             ops, s.calls, s.calls - s.ungrouped, s.group_ends, us(total, ops), us(nccl, ops),
             us(nccl - ours_in_nccl, ops), us(s.tuner_ns, ops), s.tuner_calls,
             us(s.profiler_ns, ops), s.profiler_calls, us(s.pacing_ns, ops),
             us(total - nccl - s.pacing_ns, ops)) +
         (s.set_up_ops == 0 ? std::string()
                            : fmt::format("; {} operations over {} ms left out ({:.1f} ms in all: "
                                          "connection set-up)",
                                          s.set_up_ops, kSetUpNs / 1'000'000,
                                          static_cast<double>(s.set_up_ns) / 1e6));
}

void logAppCallStats() noexcept {
  if (!appCallStatsOn()) return;
  try {
    AppCallStats& s = appCallStats();
    const std::string text = describeAppCallStats(s);
    s = {};
    atLastOperation() = {};
    if (text.empty()) return;
    const long tid = static_cast<long>(::syscall(SYS_gettid));
    CRYSTAL_INFO("host time on thread {}: {}", tid, text);
    std::fprintf(stderr, "crystal: host time on thread %ld: %s\n", tid, text.c_str());
  } catch (...) {
  }
}

}  // namespace crystal::plugin
