// The NCCL entry points that libnccl-net-crystal.so exports for LD_PRELOAD interposition.
//
// Without CRYSTAL_HOST every function is a pure pass-through to the real NCCL. With it, the
// host learns each communicator before NCCL's bootstrap starts talking to it:
//   ncclGetUniqueId        -> the host mints the id (it is the bootstrap root); NCCL's own
//                             is not called, so no root thread starts in this process
//   ncclCommInitRank*      -> COMM_INIT(id, nranks, rank), then the real call
//   ncclCommSplit          -> COMM_SPLIT(parent hash, split count, color, key), then the call
//   ncclCommDestroy/Abort  -> forget the comm (pointers get reused), then the real call
// With CRYSTAL_RANK_MAP, communicator creation maps the program's k ranks onto the target's
// N (rank_map.h) and nccl_mapped_calls.cc keeps the program's view on the calls it makes.
// ncclCommInitAll is refused in emulation mode: it builds a communicator of local GPUs only,
// which cannot include virtual ranks.
#include <exception>

#include "app_call_stats.h"
#include "fidelity.h"
#include "plugin/interpose/block_pool.h"
#include "plugin/interpose/host_session.h"
#include "plugin/interpose/mirror_calls.h"
#include "plugin/interpose/p2p_pacing.h"
#include "plugin/interpose/rank_map.h"
#include "plugin/interpose/real_nccl.h"
#include "plugin/state.h"

using crystal::interpose::CommRecord;
using crystal::interpose::NcclComm;
using crystal::interpose::NcclUniqueId;
namespace ci = crystal::interpose;

#define CRYSTAL_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// NCCL_HOSTID must be in place before NCCL first reads it, i.e. before any NCCL call. The
// plugin's notes of lost faithfulness go to the host from here on.
__attribute__((constructor)) void crystalInterposerLoaded() {
  ci::applyEmulationEnv();
  crystal::plugin::setFidelitySink(&ci::hostNote);
}

template <typename Fn>
Fn realOrNull(const char* name) {
  return ci::real<Fn>(name);
}

int missing(const char* name) {
  return ci::reportError(name, "the real NCCL function is unavailable", ci::kNcclSystemError);
}

// After a root-created comm is (being) created: remember it for later splits.
void rememberCreated(int rc, NcclComm* comm, std::uint64_t hash, int nranks, int rank) {
  if ((rc == ci::kNcclSuccess || rc == ci::kNcclInProgress) && comm != nullptr)
    ci::rememberComm(*comm, CommRecord{hash, rank, nranks, 0});
}

// `forward(nranks, rank)` makes the real call. Under CRYSTAL_RANK_MAP a k-rank
// communicator becomes the target's N-rank one (rank_map.h): the host and NCCL see (N, r_i).
template <typename Call>
int initThroughHost(const char* name, const NcclUniqueId* id, int nranks, int rank, int n_ids,
                    NcclComm* comm, Call&& forward) {
  ci::applyEmulationEnv();
  if (!ci::hostAddress()) return forward(nranks, rank);
  if (id == nullptr) return ci::reportError(name, "commId is NULL", ci::kNcclInvalidUsage);
  ci::InitArgs args;
  if (const int rc = ci::mapInitArgs(nranks, rank, args, name); rc != 0) return rc;
  std::uint64_t hash = 0;
  if (const int rc = ci::hostCommInit(*id, args.nranks, args.rank, n_ids, hash, name); rc != 0)
    return rc;
  // Before NCCL's init: its net contexts (commId = hash) then know this rank (state.h).
  crystal::plugin::PluginState::get().setCommRank(hash, args.rank, args.nranks);
  const int rc = forward(args.nranks, args.rank);
  rememberCreated(rc, comm, hash, args.nranks, args.rank);
  if (args.mapped && (rc == ci::kNcclSuccess || rc == ci::kNcclInProgress) && comm != nullptr)
    ci::rememberMapped(*comm, *args.mapped);
  // Under the rank mapping a reduce-scatter's blocks are the program's: not rewritten.
  if (!args.mapped && rc == ci::kNcclSuccess) ci::mirrorCommCreated(hash);
  // CRYSTAL_P2P_POOL: memory for the P2P connections to the virtual GPUs of this rank's node,
  // offered before the first collective connects them (block_pool.h).
  if (rc == ci::kNcclSuccess) return ci::offerBlockPool(hash, args.rank, args.nranks, name);
  return rc;
}

}  // namespace

CRYSTAL_EXPORT int ncclGetUniqueId(NcclUniqueId* uniqueId) {
  ci::applyEmulationEnv();
  if (ci::hostAddress()) return ci::hostUniqueId(uniqueId, "ncclGetUniqueId");
  auto fn = realOrNull<ci::GetUniqueIdFn>("ncclGetUniqueId");
  return fn ? fn(uniqueId) : missing("ncclGetUniqueId");
}

CRYSTAL_EXPORT int ncclCommInitRank(NcclComm* comm, int nranks, NcclUniqueId commId, int rank) {
  auto fn = realOrNull<ci::CommInitRankFn>("ncclCommInitRank");
  if (fn == nullptr) return missing("ncclCommInitRank");
  return initThroughHost("ncclCommInitRank", &commId, nranks, rank, 1, comm,
                         [&](int n, int r) { return fn(comm, n, commId, r); });
}

CRYSTAL_EXPORT int ncclCommInitRankConfig(NcclComm* comm, int nranks, NcclUniqueId commId, int rank,
                                          void* config) {
  auto fn = realOrNull<ci::CommInitRankConfigFn>("ncclCommInitRankConfig");
  if (fn == nullptr) return missing("ncclCommInitRankConfig");
  return initThroughHost("ncclCommInitRankConfig", &commId, nranks, rank, 1, comm,
                         [&](int n, int r) { return fn(comm, n, commId, r, config); });
}

CRYSTAL_EXPORT int ncclCommInitRankScalable(NcclComm* comm, int nranks, int myrank, int nId,
                                            NcclUniqueId* commIds, void* config) {
  auto fn = realOrNull<ci::CommInitRankScalableFn>("ncclCommInitRankScalable");
  if (fn == nullptr) return missing("ncclCommInitRankScalable");
  if (ci::hostAddress() && nId != 1)
    return ci::reportError("ncclCommInitRankScalable",
                           "nId=" + std::to_string(nId) +
                               ": the emulation host is the only bootstrap root, so pass one id",
                           ci::kNcclInvalidUsage);
  return initThroughHost("ncclCommInitRankScalable", commIds, nranks, myrank, nId, comm,
                         [&](int n, int r) { return fn(comm, n, r, nId, commIds, config); });
}

CRYSTAL_EXPORT int ncclCommInitAll(NcclComm* comms, int ndev, const int* devlist) {
  ci::applyEmulationEnv();
  if (ci::hostAddress())
    return ci::reportError("ncclCommInitAll",
                           "a single-process communicator of local GPUs cannot include virtual "
                           "ranks; create it with ncclGetUniqueId + ncclCommInitRank",
                           ci::kNcclInvalidUsage);
  auto fn = realOrNull<ci::CommInitAllFn>("ncclCommInitAll");
  return fn ? fn(comms, ndev, devlist) : missing("ncclCommInitAll");
}

CRYSTAL_EXPORT int ncclCommSplit(NcclComm comm, int color, int key, NcclComm* newcomm,
                                 void* config) {
  auto fn = realOrNull<ci::CommSplitFn>("ncclCommSplit");
  if (fn == nullptr) return missing("ncclCommSplit");
  if (!ci::hostAddress()) return fn(comm, color, key, newcomm, config);
  CommRecord parent;
  std::uint64_t child_hash = 0;
  if (const int rc = ci::hostCommSplit(comm, color, key, parent, child_hash, "ncclCommSplit");
      rc != 0)
    return rc;
  const int rc = fn(comm, color, key, newcomm, config);
  if (rc != ci::kNcclSuccess && rc != ci::kNcclInProgress) {
    // NCCL counts the split only after its argument and state checks passed, and those are
    // what fail in practice.
    ci::uncountSplit(comm);
    return rc;
  }
  if (newcomm != nullptr && *newcomm != nullptr) {
    CommRecord child{child_hash, -1, 0, 0};
    // A blocking split is complete here; a nonblocking one cannot be asked yet.
    if (rc == ci::kNcclSuccess) {
      if (auto rank = realOrNull<ci::CommIntFn>("ncclCommUserRank"))
        (void)rank(*newcomm, &child.rank);
      if (auto count = realOrNull<ci::CommIntFn>("ncclCommCount"))
        (void)count(*newcomm, &child.nranks);
    }
    ci::rememberComm(*newcomm, child);
    // NCCL connects the child's rings and trees at its first collective (runtime connect):
    // its real<->real connections then know this rank (state.h).
    if (child.nranks > 0)
      crystal::plugin::PluginState::get().setCommRank(child_hash, child.rank, child.nranks);
    if (rc == ci::kNcclSuccess && child.nranks > 0 && !ci::findMapped(comm))
      ci::mirrorCommCreated(child_hash);
    // CRYSTAL_P2P_POOL: a child made of whole target nodes has virtual GPUs on this rank's
    // node too (the host says whether; block_pool.h). A nonblocking split's child is not
    // known here yet: it keeps the NET for them.
    if (rc == ci::kNcclSuccess && child.nranks > 0)
      return ci::offerBlockPool(child_hash, child.rank, child.nranks, "ncclCommSplit");
  }
  return rc;
}

CRYSTAL_EXPORT int ncclCommDestroy(NcclComm comm) {
  crystal::plugin::logAppCallStats();
  ci::forgetPacing(comm);
  ci::forgetComm(comm);
  ci::forgetMapped(comm);
  auto fn = realOrNull<ci::CommFn>("ncclCommDestroy");
  return fn ? fn(comm) : missing("ncclCommDestroy");
}

CRYSTAL_EXPORT int ncclCommAbort(NcclComm comm) {
  crystal::plugin::logAppCallStats();
  ci::forgetPacing(comm);
  ci::forgetComm(comm);
  ci::forgetMapped(comm);
  auto fn = realOrNull<ci::CommFn>("ncclCommAbort");
  return fn ? fn(comm) : missing("ncclCommAbort");
}
