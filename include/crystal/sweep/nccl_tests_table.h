// Parser of what an NCCL-tests *_perf binary prints on stdout: its header lines (test name,
// ranks) and its result table, one row per size with out-of-place and in-place results.
//
// Format (NCCL-tests src/util.cu): rows "size count type redop root" then per placement
// "time algbw busbw #wrong" (#wrong is N/A with -c 0); with per-iteration timing (-I 1)
// each placement has four more columns (i_min i_max i_p99 i_cv%). Lines starting with '#'
// are headers; other lines whose first word is not a number (NCCL INFO lines, warnings)
// are not part of the table and are skipped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crystal::sweep {

struct NcclTestsResult {
  double time_us = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  std::int64_t wrong = -1;  // -1: N/A (data check off)
};

struct NcclTestsRow {
  int line = 0;  // 1-based line in the output, for messages
  std::uint64_t size_bytes = 0;
  std::uint64_t count = 0;
  std::string type;
  std::string redop;
  int root = -1;
  std::optional<NcclTestsResult> out_of_place;
  std::optional<NcclTestsResult> in_place;
};

struct NcclTestsOutput {
  std::string test_name;  // "# Collective test starting: all_reduce_perf", "" if absent
  int nranks = 0;         // "#  Rank N Group ..." lines (0 if none were printed)
  bool per_iteration = false;
  std::vector<NcclTestsRow> rows;
  std::optional<double> avg_busbw_GBps;       // "# Avg bus bandwidth : X"
  std::optional<std::int64_t> out_of_bounds;  // "# Out of bounds values : N OK|FAILED"
};

// Throws InputError "<source>:<line>: <what> in '<line>'" for a table row it cannot read
// (a line whose first word is a number but the rest is not NCCL-tests' row).
[[nodiscard]] NcclTestsOutput parseNcclTestsOutput(std::string_view text, std::string_view source);

}  // namespace crystal::sweep
