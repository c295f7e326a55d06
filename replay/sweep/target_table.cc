// Program table -> target table (include/crystal/sweep/target_table.h).
#include "crystal/sweep/target_table.h"

#include <fmt/core.h>

#include "crystal/base/error.h"

namespace crystal::sweep {

bool countIsPerRankBlock(TestOp op) {
  return op == TestOp::AllGather || op == TestOp::ReduceScatter || op == TestOp::AllToAll;
}

std::vector<SweepRow> targetRows(const NcclTestsOutput& program, TestOp op, int program_ranks,
                                 int target_ranks, bool in_place, std::string_view source) {
  if (program_ranks < 1 || target_ranks < program_ranks)
    throw InputError(fmt::format("{}: {} program ranks cannot map onto a {}-rank target", source,
                                 program_ranks, target_ranks));
  std::vector<SweepRow> rows;
  for (const NcclTestsRow& p : program.rows) {
    const auto& measured = in_place ? p.in_place : p.out_of_place;
    if (!measured) continue;
    DataType type;
    try {
      type = parseDataType(p.type);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}:{}: {}", source, p.line, e.what()));
    }
    SweepRow r;
    r.op = op;
    r.type = p.type;
    r.redop = p.redop;
    r.root = p.root;
    r.time_us = measured->time_us;
    r.program_busbw_GBps = measured->busbw_GBps;
    r.wrong = measured->wrong;
    r.in_place = in_place;
    r.algo = r.proto = "-";
    if (countIsPerRankBlock(op)) {
      r.count = mappedBlockCount(p.count, program_ranks, target_ranks);
      r.size_bytes = r.count * static_cast<std::uint64_t>(target_ranks) *
                     static_cast<std::uint64_t>(type.bytes);
    } else {
      r.count = p.count;
      r.size_bytes = p.count * static_cast<std::uint64_t>(type.bytes);
    }
    fillBandwidth(r, target_ranks);
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace crystal::sweep
