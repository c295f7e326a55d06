// Tables and JSON of sweep rows: NCCL-tests' column layout (size, count, type, redop, root,
// time, algbw, busbw) plus what the model chose (algorithm, protocol, channels) or, for an
// emulated run, the bus bandwidth the program itself printed for its own rank count.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>

#include "crystal/sweep/sweep.h"

namespace crystal::sweep {

// Where the rows came from; decides the extra columns.
enum class RowSource { Model, Emulated };

// One table per op in `rows` (rows of one op are consecutive), each with a '#' header that
// names the op, N and the source. Times and bandwidths are printed like NCCL-tests does
// (7 and 6 characters wide, fewer decimals as numbers grow).
[[nodiscard]] std::string formatSweepTable(std::span<const SweepRow> rows, int nranks,
                                           RowSource source);

// {"nranks": N, "source": "model"|"emulated", "results": [{"op", "size", "count", "type",
// "redop", "root", "time", "alg_bw", "bus_bw", "algo", "proto", "channels"}]} (NCCL-tests'
// -J keys where they exist).
[[nodiscard]] nlohmann::json sweepJson(std::span<const SweepRow> rows, int nranks,
                                       RowSource source);

// NCCL-tests' number format: `value` in `width` characters, 2 decimals, fewer if it does not
// fit, exponent notation last.
[[nodiscard]] std::string ncclTestsNumber(double value, int width);

}  // namespace crystal::sweep
