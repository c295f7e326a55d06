// Entry points that cmd_simulate.cc and cmd_emulate.cc hand over to for NCCL-tests work
// (docs/nccl-tests.md).
#pragma once

#include <span>
#include <string>

namespace crystal::cli {

// `crystal simulate CONFIG --sweep ...`: the NCCL-tests table of the target from the model.
int simulateSweep(std::span<const std::string> args);

// `crystal emulate CONFIG [opts] -- CMD...` where CMD runs an NCCL-tests binary: runs it as
// `crystal nccl-tests` does (emulate in a child whose stdout is kept, then the table for
// the target's ranks) and returns the exit code; -1 for any other CMD, and inside that child.
int emulateNcclTests(std::span<const std::string> args);

}  // namespace crystal::cli
