// Entry points that cmd_simulate.cc and cmd_emulate.cc hand over to for NCCL-tests work
// (docs/nccl-tests.md).
#pragma once

#include <span>
#include <string>

namespace crystal::cli {

// `crystal simulate CONFIG --sweep ...`: the NCCL-tests table of the target from the model.
int simulateSweep(std::span<const std::string> args);

}  // namespace crystal::cli
