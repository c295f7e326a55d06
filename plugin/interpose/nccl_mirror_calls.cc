// NCCL calls the interposer watches for the mirror rewrites (mirror_calls.h), each a
// pass-through otherwise: ncclGroupStart / ncclGroupEnd / ncclGroupSimulateEnd keep the group
// depth the rewrites wait on (a grouped collective is enqueued at the outermost ncclGroupEnd,
// so its rewrite must come after that); ncclRedOpCreatePreMulSum turns the rewrite off for
// its communicator (it does not know the op's scalar).
#include <atomic>

#include "app_call_stats.h"
#include "plugin/interpose/host_session.h"
#include "plugin/interpose/mirror_calls.h"
#include "plugin/interpose/p2p_pacing.h"
#include "plugin/interpose/real_nccl.h"

namespace ci = crystal::interpose;

#define CRYSTAL_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using GroupFn = int (*)();
using SimulateEndFn = int (*)(void*);  // ncclSimInfo_t*
// ncclRedOp_t*, scalar, ncclDataType_t, ncclScalarResidence_t, ncclComm_t
using PreMulSumFn = int (*)(int*, void*, int, int, ci::NcclComm);

}  // namespace

CRYSTAL_EXPORT int ncclGroupStart() {
  CRYSTAL_REAL(GroupFn, ncclGroupStart);
  const int rc = real_fn();
  if (rc == ci::kNcclSuccess) {
    ci::mirrorGroupStarted();
    ci::pacedGroupStarted();
  }
  return rc;
}

CRYSTAL_EXPORT int ncclGroupEnd() {
  CRYSTAL_REAL(GroupFn, ncclGroupEnd);
  using crystal::plugin::AppCallStats;
  using crystal::plugin::AppSpan;
  // The outermost end enqueues the group: its host time is an operation's (app_call_stats.h).
  const bool outermost = ci::pacedGroupDepth() == 1;
  const crystal::plugin::AppOperation operation(outermost);  // ends after `whole`
  const AppSpan whole(&AppCallStats::group_end_ns, outermost ? &AppCallStats::group_ends : nullptr);
  int rc = ci::kNcclSuccess;
  {
    const AppSpan nccl(&AppCallStats::group_end_nccl_ns);
    rc = real_fn();
  }
  ci::pacedGroupEnded();
  return ci::mirrorGroupEnded("ncclGroupEnd", rc, rc == ci::kNcclSuccess);
}

// Ends a group without launching it (NCCL computes its estimated time): nothing to rewrite.
CRYSTAL_EXPORT int ncclGroupSimulateEnd(void* sim_info) {
  CRYSTAL_REAL(SimulateEndFn, ncclGroupSimulateEnd);
  const int rc = real_fn(sim_info);
  ci::pacedGroupEnded();
  return ci::mirrorGroupEnded("ncclGroupSimulateEnd", rc, false);
}

CRYSTAL_EXPORT int ncclRedOpCreatePreMulSum(int* op, void* scalar, int type, int residence,
                                            ci::NcclComm comm) {
  CRYSTAL_REAL(PreMulSumFn, ncclRedOpCreatePreMulSum);
  const int rc = real_fn(op, scalar, type, residence, comm);
  if (rc == ci::kNcclSuccess) ci::mirrorCustomOp(comm);
  return rc;
}
