#include "call_stats.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <deque>
#include <mutex>

#include "crystal/base/log.h"

namespace crystal::plugin {
namespace {

struct Entry {
  ThreadCallStats stats;
  long tid = 0;
  // What the previous log saw (the logger's only, under Registry::mu).
  std::int64_t seen[5] = {0, 0, 0, 0, 0};
};

struct Registry {
  std::mutex mu;
  std::deque<Entry> entries;  // stable addresses; a thread's entry outlives it (a few bytes)
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: proxy threads may outlive statics
  return *r;
}

}  // namespace

ThreadCallStats& threadCallStats() {
  thread_local ThreadCallStats* mine = [] {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    Entry& e = r.entries.emplace_back();
    e.tid = static_cast<long>(::syscall(SYS_gettid));
    return &e.stats;
  }();
  return *mine;
}

void logThreadCallStats(std::int64_t min_calls) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (Entry& e : r.entries) {
    const ThreadCallStats& s = e.stats;
    const std::int64_t now[5] = {s.calls.get(), s.inside_ns.get(), s.active_ns.get(),
                                 s.cuda_calls.get(), s.cuda_ns.get()};
    std::int64_t d[5];
    for (int i = 0; i < 5; ++i) d[i] = now[i] - e.seen[i];
    if (d[0] < min_calls) continue;
    for (int i = 0; i < 5; ++i) e.seen[i] = now[i];
    const double inside_ms = static_cast<double>(d[1]) / 1e6;
    const double active_ms = static_cast<double>(d[2]) / 1e6;
    CRYSTAL_INFO("data calls on thread {}: {} in {:.1f} ms of activity (gaps under 1 ms), "
                 "{:.1f} ms inside the plugin ({:.1f} %, {:.0f} ns per call; NCCL's own time "
                 "between calls {:.0f} ns), of which {} CUDA driver calls {:.1f} ms ({:.2f} us "
                 "each)",
                 e.tid, d[0], active_ms, inside_ms,
                 active_ms > 0 ? 100.0 * inside_ms / active_ms : 0.0,
                 static_cast<double>(d[1]) / static_cast<double>(d[0]),
                 static_cast<double>(d[2] - d[1]) / static_cast<double>(d[0]), d[3],
                 static_cast<double>(d[4]) / 1e6,
                 d[3] ? static_cast<double>(d[4]) / 1e3 / static_cast<double>(d[3]) : 0.0);
  }
}

}  // namespace crystal::plugin
