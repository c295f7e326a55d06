// Test helper: writes a recording as the Chrome-trace JSON the PyTorch profiler (Kineto)
// would produce for that rank (kernels with collective metadata, launch calls, stream waits,
// memory events, ProfilerStep and nccl:coalesced ranges). Lets the tests make small traces
// of known content instead of shipping downloaded ones.
#pragma once

#include <string>

#include "crystal/graph/import.h"

namespace crystal::graph::testing {

struct KinetoWriteOptions {
  bool members = true;       // write "Process Group Ranks"
  bool descriptions = true;  // write "Process Group Description" (= the family name)
};

std::string writeKinetoTrace(const RecordedRank& r, KinetoWriteOptions opt = {});

}  // namespace crystal::graph::testing
