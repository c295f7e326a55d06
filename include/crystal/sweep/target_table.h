// An NCCL-tests table measured under emulation, restated for the target's communicator.
//
// The program runs on its k real ranks; under the rank mapping (docs/nccl-tests.md) each of
// its communicators is the target's N-rank one. Ops whose buffers hold one block per rank
// (all-gather, reduce-scatter, all-to-all) are called by the interposer with the block
// scaled by k/N (mappedBlockCount) so the bytes stay inside the program's buffers and the
// call moves what NCCL-tests would move on N ranks at that size. The measured time is the
// program's; algbw = target size / time and busbw uses N (the program used k).
#pragma once

#include <cstdint>
#include <vector>

#include "crystal/sweep/nccl_tests_table.h"
#include "crystal/sweep/sweep.h"

namespace crystal::sweep {

// Elements per rank block on the target for a program block of `count` elements with
// k program ranks and N target ranks: floor(count * k / N), without overflow.
[[nodiscard]] constexpr std::uint64_t mappedBlockCount(std::uint64_t count, int program_ranks,
                                                       int target_ranks) {
  if (program_ranks <= 0 || target_ranks <= 0) return count;
  const auto k = static_cast<std::uint64_t>(program_ranks);
  const auto n = static_cast<std::uint64_t>(target_ranks);
  return (count / n) * k + ((count % n) * k) / n;
}

// True for the ops whose count is a per-rank block (all-gather, reduce-scatter, all-to-all).
[[nodiscard]] bool countIsPerRankBlock(TestOp op);

// The out-of-place (or in-place) results of `program` as rows for N = target_ranks. Rows
// without that placement are left out. Throws InputError naming the line for a type name
// NCCL-tests does not have.
[[nodiscard]] std::vector<SweepRow> targetRows(const NcclTestsOutput& program, TestOp op,
                                               int program_ranks, int target_ranks, bool in_place,
                                               std::string_view source);

}  // namespace crystal::sweep
