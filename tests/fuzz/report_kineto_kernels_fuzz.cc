// libFuzzer: the report's reader of Kineto kernels, then exposed communication over what it
// read. Anything but InputError is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/emulate_report.h"
#include "crystal/base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace crystal::cli::report;
  try {
    RankInputs in;
    in.rank = 0;
    in.kineto = parseKinetoKernels(std::string_view(reinterpret_cast<const char*>(data), size),
                                   "fuzz.json");
    (void)analyzeRank(in, StepPlan{2, 2, 1});
  } catch (const crystal::InputError&) {
  }
  return 0;
}
