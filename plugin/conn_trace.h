// Opt-in record of every completed request of the data path, for finding where emulated time
// goes on a GPU (docs/plugin.md "Per-request trace"). CRYSTAL_TRACE_CONN=PREFIX turns it on;
// the process writes PREFIX.<pid>.csv at exit: one row per request that test() reported done,
// with the connection it belongs to, its post time, the modelled due time, the time the
// proxy first tested it, how often it did, and the time test() saw it done (first test long
// after due: the proxy came late; many tests after due: the plugin held it). Off (the default), the data path pays one pointer compare.
//
// Recording is lock-free and allocation-free: a fixed array (CRYSTAL_TRACE_CONN_MAX rows,
// default 2,000,000, 80 B each) claimed with one atomic add; rows past the end are counted,
// not kept.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "crystal/live/clock.h"

namespace crystal::plugin {

// What a connection is, as the trace names it.
struct TraceConnInfo {
  char dir = 's';        // 's' send, 'r' receive
  char peer_kind = 'v';  // 'v' virtual peer, 'R' real peer
  char timing = 'p';     // virtual: 'r' ring, 't' tree, 'p' peer-ready; real: 'p'
  int self_rank = -1;
  int peer_rank = -1;
  int nranks = 0;
  int graph = -1;
  int distance = 0;
  int ordinal = 0;
  int dev = -1;  // the plugin's net device (NIC) NCCL put it on
};

struct TraceRow {
  std::uint32_t conn = 0;
  std::uint32_t step = 0;
  std::uint64_t bytes = 0;
  live::TimeNs posted = 0;
  live::TimeNs due = 0;  // INT64_MAX: not modelled (real peer without a known time)
  live::TimeNs done = 0;
  live::TimeNs first_test = 0;  // the proxy's first test() of the request
  std::uint32_t tests = 0;      // test() calls, the one that saw it done included
  std::int64_t conn_step = -1;  // Request::conn_step
  std::uint64_t mirror_key = UINT64_MAX;  // Request::mirror_k of a mirrored request
  char written = 0;                       // Request::written (receives from virtual peers)
  bool hold_ran_out = false;              // Request::hold_ran_out
};

class ConnTrace {
 public:
  ConnTrace(std::string path, std::size_t capacity);
  // The process's trace from CRYSTAL_TRACE_CONN, or nullptr when it is unset.
  [[nodiscard]] static ConnTrace* global();

  [[nodiscard]] std::uint32_t addConn(const TraceConnInfo& info);
  void record(const TraceRow& row) noexcept {
    const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= rows_.size()) return;
    rows_[i].row = row;
    rows_[i].ready.store(true, std::memory_order_release);
  }
  // Writes the CSV (header + rows in completion order); returns the rows written. Rows past
  // the capacity are reported on stderr as dropped.
  std::size_t write();
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
  // A slot is claimed (next_) before its row is written: the periodic rewrite skips rows
  // not written yet (the next write has them).
  struct Slot {
    TraceRow row;
    std::atomic<bool> ready{false};
  };
  std::vector<Slot> rows_;
  std::atomic<std::size_t> next_{0};
  std::mutex mu_;  // guards conns_ (connection setup, not the data path)
  std::vector<TraceConnInfo> conns_;
};

}  // namespace crystal::plugin
