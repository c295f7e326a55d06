// The profiler table NCCL looks up by name (NCCL_PROFILER_PLUGIN=<this library>). Exported
// through plugin/exports.map; the implementation is plugin/profiler/recorder.cc.
#include "plugin/profiler/recorder.h"

// `extern "C"` without braces: the const object gets external linkage and C's name.
extern "C" __attribute__((visibility("default")))
const crystal::nccl::ncclProfiler_v5_t ncclProfiler_v5 = crystal::profiler::profilerV5();
