// The profiler table NCCL looks up by name (NCCL_PROFILER_PLUGIN=<this library>). Exported
// through plugin/exports.map; the implementation is plugin/profiler/recorder.cc. Event starts
// and stops are counted in the calling thread's host time (plugin/app_call_stats.h): NCCL
// calls them on the thread that enqueues, inside the program's NCCL call.
#include "app_call_stats.h"
#include "plugin/profiler/recorder.h"

namespace {

using crystal::nccl::ncclProfilerEventDescr_v5_t;
using crystal::nccl::ncclResult_t;
using crystal::plugin::AppCallStats;
using crystal::plugin::AppSpan;

ncclResult_t startTimed(void* context, void** handle, ncclProfilerEventDescr_v5_t* d) {
  const AppSpan span(&AppCallStats::profiler_ns, &AppCallStats::profiler_calls);
  return crystal::profiler::profilerV5().startEvent(context, handle, d);
}

ncclResult_t stopTimed(void* handle) {
  const AppSpan span(&AppCallStats::profiler_ns, &AppCallStats::profiler_calls);
  return crystal::profiler::profilerV5().stopEvent(handle);
}

}  // namespace

// `extern "C"` without braces: the const object gets external linkage and C's name.
extern "C" __attribute__((visibility("default")))
const crystal::nccl::ncclProfiler_v5_t ncclProfiler_v5 = {
    crystal::profiler::profilerV5().name,
    crystal::profiler::profilerV5().init,
    startTimed,
    stopTimed,
    crystal::profiler::profilerV5().recordEventState,
    crystal::profiler::profilerV5().finalize};
