#include "app_call_stats.h"

#include <fmt/core.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <utility>

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
  } else {
    AppCallStats::Op op;
    op.index = last.ungrouped + last.group_ends;
    op.ns = ns;
    op.nccl_ns = s.call_nccl_ns + s.group_end_nccl_ns - last.call_nccl_ns - last.group_end_nccl_ns;
    op.tuner_ns = s.tuner_ns - last.tuner_ns;
    op.profiler_ns = s.profiler_ns - last.profiler_ns;
    op.pacing_ns = s.pacing_ns - last.pacing_ns;
    // Insert in order; the fastest of the kept ones drops out.
    for (AppCallStats::Op& kept : s.slowest)
      if (op.ns > kept.ns) std::swap(op, kept);
  }
  last = s;
}

namespace {

std::string describeOp(const AppCallStats::Op& o) {
  const std::int64_t ours_in_nccl = o.tuner_ns + o.profiler_ns;
  return fmt::format("#{} {:.2f} us (NCCL's own {:.2f}, the tuner {:.2f}, the profiler {:.2f}, "
                     "P2P pacing {:.2f}, the interposer's other work {:.2f})",
                     o.index, us(o.ns, 1), us(o.nccl_ns - ours_in_nccl, 1), us(o.tuner_ns, 1),
                     us(o.profiler_ns, 1), us(o.pacing_ns, 1),
                     us(o.ns - o.nccl_ns - o.pacing_ns, 1));
}

// "; the slowest: #i … us (…), …" over the kept operations, when there were two or more.
std::string slowestText(const AppCallStats& s) {
  if (s.ungrouped + s.group_ends < 2 || s.slowest[0].ns == 0) return {};
  std::string out = "; the slowest: ";
  for (const AppCallStats::Op& o : s.slowest) {
    if (o.ns == 0) break;
    if (&o != &s.slowest[0]) out += ", ";
    out += describeOp(o);
  }
  return out;
}

}  // namespace

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
                                          static_cast<double>(s.set_up_ns) / 1e6)) +
         slowestText(s);
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
