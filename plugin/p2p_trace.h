// Opt-in record of what a P2P pacing agent did, for finding where a paced operation's time
// goes on a GPU (docs/plugin.md "P2P pacing trace"). CRYSTAL_P2P_TRACE=PREFIX turns it on;
// each agent writes PREFIX.<pid>.<comm hash>.csv when its communicator is destroyed, one row
// per event, times in ns on the pacing thread's clock (live::nowNs):
//   S  the stream reached an operation (value: its index; due_ns: its bytes and op: its
//      collective, from the tuner's log entry)
//   D  the stream went past it (value: the agent kernel's passes so far)
//   o  the CPU saw R's counter of a connection move to `value`; gpu_ns: when the agent
//      kernel saw it
//   r  the CPU released `value` for R's own counter; due_ns: when the model made it due
//   g  the agent kernel stored `value` at R's counter at gpu_ns
//   a  an operation armed with a prelude (CRYSTAL_P2P_PRELUDE; value: its units, conn: its
//      receive connections, due_ns: its last unit's offset from the anchor)
//   A  the agent kernel anchored the armed operation on receive connection `conn` at gpu_ns
//      (value 1: missed, R took its receives before the arm)
// GPU times are mapped onto the CPU clock by the smallest (CPU time - GPU timer) seen over the
// run: a GPU time is late by at most that sample's PCIe read, ~1 us.
//
// The agent's pacing thread is the only writer: rows go into a fixed array (CRYSTAL_P2P_TRACE_MAX,
// default 1,000,000, 48 B each); rows past it are counted, not kept.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "crystal/live/clock.h"

namespace crystal::plugin {

struct P2pTraceRow {
  live::TimeNs t = 0;
  live::TimeNs due = -1;        // 'r': the model's due time; 'S': the operation's bytes
  std::uint64_t gpu = 0;        // 'o', 'g': the GPU's global timer (0: none)
  std::uint64_t value = 0;
  std::int32_t conn = -1;
  char kind = '?';
  std::int8_t func = -1;  // 'S': the collective (model::Func), -1 = not logged
};

class P2pTrace {
 public:
  // The trace an agent of `comm_hash` makes from CRYSTAL_P2P_TRACE, or nullptr when unset.
  // Throws InputError on a bad CRYSTAL_P2P_TRACE_MAX.
  [[nodiscard]] static std::unique_ptr<P2pTrace> fromEnv(std::uint64_t comm_hash);
  P2pTrace(std::string path, std::size_t capacity);

  // A connection's identity, for the file's conn columns (index = the agent's connection).
  void addConn(bool send, int ordinal);
  void record(const P2pTraceRow& row) noexcept {
    if (n_ < rows_.size()) rows_[n_] = row;
    ++n_;
  }
  // A sample of the GPU timer read at CPU time `cpu`.
  void clockSample(live::TimeNs cpu, std::uint64_t gpu) noexcept {
    if (gpu == 0) return;
    const auto d = cpu - static_cast<live::TimeNs>(gpu);
    if (d < offset_) offset_ = d;
  }
  // Writes the CSV; returns the rows written (0 on an I/O error, said on stderr).
  std::size_t write() const;
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::size_t recorded() const { return n_; }

 private:
  std::string path_;
  std::vector<P2pTraceRow> rows_;
  std::size_t n_ = 0;
  live::TimeNs offset_ = std::numeric_limits<live::TimeNs>::max();
  std::vector<std::pair<bool, int>> conns_;  // (send, ordinal)
};

}  // namespace crystal::plugin
