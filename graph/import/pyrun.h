// `rank<R>.pyrun.json`: what python/crystal_site measured in one PyTorch process (format
// "crystal-pyrun-1", docs/record.md): per-iteration GPU and host times, the caching
// allocator's peaks, and the name of its torch.profiler trace in record mode.
//
// Read by `crystal record` (peak memory into the recorded graph) and by `crystal emulate`'s
// end-of-run report.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "crystal/graph/import.h"

namespace crystal::graph {

// One iteration: from the end of the previous optimizer step (iteration 0: the first module
// forward) to the end of this one. A time is absent when it could not be measured (no CUDA
// in the process; iteration 0 when no nn.Module forward ran before the first step).
struct PyRunStep {
  std::optional<double> gpu_ms;  // CUDA events on the current stream
  std::optional<double> host_ms;
};

struct PyRun {
  std::string source;  // the file it was read from
  std::int32_t rank = 0;
  std::int32_t world_size = 1;
  std::int64_t pid = 0;
  std::vector<PyRunStep> steps;
  std::uint64_t max_memory_allocated = 0;  // torch.cuda.max_memory_allocated() at exit
  std::uint64_t max_memory_reserved = 0;   // torch.cuda.max_memory_reserved() at exit
  std::string kineto_trace;                // file name in the same directory; empty: none
  std::string torch;                       // torch.__version__
  std::optional<std::array<int, 3>> nccl;  // torch.cuda.nccl.version()
};

// Throws InputError naming `source` and the key ("steps[3].gpu_ms") that is missing or bad.
[[nodiscard]] PyRun parsePyRun(std::string_view json_text, const std::string& source);
[[nodiscard]] PyRun readPyRun(const std::string& path);

// Makes the peak memory of `rec` (the largest running sum of its Alloc - Free ops) equal the
// allocator's peak `run.max_memory_allocated`. A Kineto recording starts with the bytes
// allocated before its window and then follows the allocator's total, so its peak is the
// window's; when the process peaked outside the traced iterations, a transient Alloc/Free
// pair of the missing bytes goes right after the first IterationMark, with a note. Throws
// InputError (both files named) when the ranks differ or the recording already exceeds the
// allocator's peak (files of different runs).
void applyPyRunMemory(RecordedRank& rec, const PyRun& run);

}  // namespace crystal::graph
