// Record mode: NCCL's profiler plugin ABI (ncclProfiler_v5) writing every collective and
// point-to-point call of this process to a JSON-lines file (CRYSTAL_RECORD). The file is
// read back by crystal::graph::parseNcclRecording (graph/import/nccl_recording.cc).
//
// Per communicator (init): hash, name, node count, size, rank. Per event, at its stop: the
// API call (func, count, datatype, root, stream, CUDA-graph capture) with enqueue and return
// times, and the task NCCL made of it (sequence number, algorithm, protocol, channels, peer)
// with start and completion times. Never fails the job: any problem turns recording off
// for that communicator and is logged.
#pragma once

#include "crystal/nccl/profiler_v5.h"

namespace crystal::profiler {

// The function table NCCL calls (exported as ncclProfiler_v5 by plugin/profiler/export.cc).
[[nodiscard]] const nccl::ncclProfiler_v5_t& profilerV5();

}  // namespace crystal::profiler
