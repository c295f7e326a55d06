#include "conn_trace.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "crystal/base/error.h"
#include "crystal/base/thread_name.h"
#include "params.h"

namespace crystal::plugin {
namespace {

ConnTrace* makeGlobal() {
  const std::string prefix = paramString("CRYSTAL_TRACE_CONN");
  if (prefix.empty()) return nullptr;
  const std::int64_t rows = paramInt("CRYSTAL_TRACE_CONN_MAX");
  if (rows <= 0) throw InputError(fmt::format("CRYSTAL_TRACE_CONN_MAX={}: must be positive", rows));
  // Leaked on purpose: proxy threads may still record while static destructors run; the
  // rows are written by an atexit handler instead.
  auto* t =
      new ConnTrace(fmt::format("{}.{}.csv", prefix, ::getpid()), static_cast<std::size_t>(rows));
  std::atexit([] { (void)ConnTrace::global()->write(); });
  // A hung job is killed, and atexit handlers do not run then: rewrite it as it goes.
  const std::int64_t every = paramInt("CRYSTAL_TRACE_CONN_EVERY_S");
  if (every < 0)
    throw InputError(fmt::format("CRYSTAL_TRACE_CONN_EVERY_S={}: must be >= 0", every));
  if (every > 0)
    std::thread([t, every] {
      nameThisThread("crystal trace");
      for (;;) {
        std::this_thread::sleep_for(std::chrono::seconds(every));
        (void)t->write();
      }
    }).detach();
  return t;
}

}  // namespace

ConnTrace::ConnTrace(std::string path, std::size_t capacity)
    : path_(std::move(path)), rows_(capacity) {}

ConnTrace* ConnTrace::global() {
  static ConnTrace* const t = makeGlobal();
  return t;
}

std::uint32_t ConnTrace::addConn(const TraceConnInfo& info) {
  std::lock_guard lock(mu_);
  conns_.push_back(info);
  return static_cast<std::uint32_t>(conns_.size() - 1);
}

std::size_t ConnTrace::write() {
  std::lock_guard lock(mu_);
  const std::size_t claimed = next_.load(std::memory_order_acquire);
  const std::size_t n = std::min(claimed, rows_.size());
  // Written beside and renamed over the trace: a process killed mid-rewrite (the reason
  // for CRYSTAL_TRACE_CONN_EVERY_S) leaves the previous complete file, never a truncated one.
  const std::string tmp = path_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "crystal: cannot write the connection trace %s\n", tmp.c_str());
    return 0;
  }
  std::fputs(
      "conn,dir,peer_kind,timing,self,peer,nranks,graph,distance,ordinal,step,bytes,"
      "posted_ns,due_ns,done_ns,dev,first_test_ns,tests,conn_step,mirror_op,mirror_index,data\n",
      f);
  std::size_t written_rows = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!rows_[i].ready.load(std::memory_order_acquire)) continue;  // claimed, being written
    ++written_rows;
    const TraceRow& r = rows_[i].row;
    const TraceConnInfo c = r.conn < conns_.size() ? conns_[r.conn] : TraceConnInfo{};
    const long long due = r.due == INT64_MAX ? -1 : static_cast<long long>(r.due);
    // The mirror key is (operation << 24) | index (virtual_comm.cc mirrorKey).
    const long long mop = r.mirror_key == UINT64_MAX ? -1 : static_cast<long long>(r.mirror_key >> 24);
    const long long midx =
        r.mirror_key == UINT64_MAX ? -1 : static_cast<long long>(r.mirror_key & 0xffffff);
    char data[3] = {r.written ? r.written : '-', r.hold_ran_out ? 'h' : '\0', '\0'};
    std::fprintf(f, "%u,%c,%c,%c,%d,%d,%d,%d,%d,%d,%u,%llu,%lld,%lld,%lld,%d,%lld,%u,%lld,%lld,%lld,%s\n", r.conn,
                 c.dir, c.peer_kind, c.timing, c.self_rank, c.peer_rank, c.nranks, c.graph,
                 c.distance, c.ordinal, r.step, static_cast<unsigned long long>(r.bytes),
                 static_cast<long long>(r.posted), due, static_cast<long long>(r.done), c.dev,
                 static_cast<long long>(r.first_test), r.tests,
                 static_cast<long long>(r.conn_step), mop, midx, data);
  }
  const bool written = std::fclose(f) == 0;
  if (!written || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    std::fprintf(stderr, "crystal: cannot write the connection trace %s\n", path_.c_str());
    std::remove(tmp.c_str());
    return 0;
  }
  if (claimed > rows_.size())
    std::fprintf(stderr,
                 "crystal: connection trace %s kept %zu rows, dropped %zu "
                 "(raise CRYSTAL_TRACE_CONN_MAX)\n",
                 path_.c_str(), written_rows, claimed - n);
  return written_rows;
}

}  // namespace crystal::plugin
