// NCCL calls the interposer rewrites: for communicators created under the rank mapping
// (plugin/interpose/rank_map.h) their counts, peers and roots; under data policy mirror the
// results of broadcasts from virtual roots and of reductions (mirror_calls.h). On any other
// communicator each is a pass-through to the real NCCL: one atomic load and one lookup more
// than a direct call.
#include <atomic>
#include <cstddef>
#include <exception>
#include <optional>
#include <utility>

#include "crystal/sweep/target_table.h"
#include "plugin/interpose/host_session.h"
#include "plugin/interpose/mirror_calls.h"
#include "plugin/interpose/p2p_pacing.h"
#include "plugin/interpose/rank_map.h"
#include "plugin/interpose/real_nccl.h"

using crystal::interpose::NcclComm;
namespace ci = crystal::interpose;

#define CRYSTAL_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using Stream = void*;  // cudaStream_t
using DataType = int;  // ncclDataType_t
using RedOp = int;     // ncclRedOp_t
using CountFn = int (*)(NcclComm, int*);
using AllGatherFn = int (*)(const void*, void*, std::size_t, DataType, NcclComm, Stream);
using AllReduceFn = int (*)(const void*, void*, std::size_t, DataType, RedOp, NcclComm, Stream);
using ReduceScatterFn = int (*)(const void*, void*, std::size_t, DataType, RedOp, NcclComm, Stream);
using AlltoAllFn = int (*)(const void*, void*, std::size_t, DataType, NcclComm, Stream);
using P2pSendFn = int (*)(const void*, std::size_t, DataType, int, NcclComm, Stream);
using P2pRecvFn = int (*)(void*, std::size_t, DataType, int, NcclComm, Stream);
using BroadcastFn = int (*)(const void*, void*, std::size_t, DataType, int, NcclComm, Stream);
using ReduceFn = int (*)(const void*, void*, std::size_t, DataType, RedOp, int, NcclComm, Stream);

std::size_t targetBlock(const ci::MappedComm& m, std::size_t count) {
  return static_cast<std::size_t>(
      crystal::sweep::mappedBlockCount(count, m.program_nranks, m.target_nranks));
}

using Mirror = std::optional<crystal::plugin::MirrorResult>;

// NCCL's call `call()` between the mirror rewrite's two halves (mirror_calls.h); `plan()`
// makes the rewrite, if any.
template <typename Plan, typename Call>
int withMirror(const char* caller, Plan&& plan, Call&& call) {
  Mirror m;
  try {
    if (auto planned = plan()) m.emplace(std::move(*planned));
  } catch (const std::exception& e) {
    return ci::reportError(caller, e.what(), ci::kNcclSystemError);
  }
  if (const int rc = ci::mirrorBefore(caller, m); rc != ci::kNcclSuccess) return rc;
  return ci::mirrorAfter(caller, call(), m);
}

}  // namespace

CRYSTAL_EXPORT int ncclCommCount(NcclComm comm, int* count) {
  CRYSTAL_REAL(CountFn, ncclCommCount);
  if (count != nullptr)
    if (const auto m = ci::findMapped(comm)) {
      *count = m->program_nranks;
      return ci::kNcclSuccess;
    }
  return real_fn(comm, count);
}

CRYSTAL_EXPORT int ncclCommUserRank(NcclComm comm, int* rank) {
  CRYSTAL_REAL(CountFn, ncclCommUserRank);
  if (rank != nullptr)
    if (const auto m = ci::findMapped(comm)) {
      *rank = m->program_rank;
      return ci::kNcclSuccess;
    }
  return real_fn(comm, rank);
}

CRYSTAL_EXPORT int ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount,
                                 DataType type, NcclComm comm, Stream stream) {
  CRYSTAL_REAL(AllGatherFn, ncclAllGather);
  if (const auto m = ci::findMapped(comm)) sendcount = targetBlock(*m, sendcount);
  return ci::withPacing(comm, stream, "ncclAllGather",
                        [&] { return real_fn(sendbuff, recvbuff, sendcount, type, comm, stream); });
}

CRYSTAL_EXPORT int ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount,
                                     DataType type, RedOp op, NcclComm comm, Stream stream) {
  CRYSTAL_REAL(ReduceScatterFn, ncclReduceScatter);
  const auto mapped = ci::findMapped(comm);
  if (mapped) recvcount = targetBlock(*mapped, recvcount);
  return withMirror(
      "ncclReduceScatter",
      [&]() -> Mirror {
        // Under the rank mapping the program's blocks are not the target's: left alone.
        const auto rec = ci::findComm(comm);
        if (mapped || !rec || sendbuff == nullptr) return std::nullopt;
        const auto* own = static_cast<const char*>(sendbuff) +
                          static_cast<std::size_t>(rec->rank) * recvcount *
                              crystal::plugin::ncclTypeBytes(type);
        return ci::mirrorReduction(own, recvbuff, recvcount, type, op, comm, stream);
      },
      [&] {
        return ci::withPacing(comm, stream, "ncclReduceScatter", [&] {
          return real_fn(sendbuff, recvbuff, recvcount, type, op, comm, stream);
        });
      });
}

CRYSTAL_EXPORT int ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count,
                                 DataType type, RedOp op, NcclComm comm, Stream stream) {
  CRYSTAL_REAL(AllReduceFn, ncclAllReduce);
  return withMirror(
      "ncclAllReduce",
      [&] { return ci::mirrorReduction(sendbuff, recvbuff, count, type, op, comm, stream); },
      [&] {
        return ci::withPacing(comm, stream, "ncclAllReduce", [&] {
          return real_fn(sendbuff, recvbuff, count, type, op, comm, stream);
        });
      });
}

CRYSTAL_EXPORT int ncclAlltoAll(const void* sendbuff, void* recvbuff, std::size_t count,
                                DataType type, NcclComm comm, Stream stream) {
  CRYSTAL_REAL(AlltoAllFn, ncclAlltoAll);
  if (const auto m = ci::findMapped(comm)) count = targetBlock(*m, count);
  return ci::withPacing(comm, stream, "ncclAlltoAll",
                        [&] { return real_fn(sendbuff, recvbuff, count, type, comm, stream); });
}

CRYSTAL_EXPORT int ncclSend(const void* sendbuff, std::size_t count, DataType type, int peer,
                            NcclComm comm, Stream stream) {
  CRYSTAL_REAL(P2pSendFn, ncclSend);
  if (const auto m = ci::findMapped(comm)) peer = ci::targetPeer(*m, peer, true);
  return ci::withPacing(comm, stream, "ncclSend",
                        [&] { return real_fn(sendbuff, count, type, peer, comm, stream); });
}

CRYSTAL_EXPORT int ncclRecv(void* recvbuff, std::size_t count, DataType type, int peer,
                            NcclComm comm, Stream stream) {
  CRYSTAL_REAL(P2pRecvFn, ncclRecv);
  if (const auto m = ci::findMapped(comm)) peer = ci::targetPeer(*m, peer, false);
  return ci::withPacing(comm, stream, "ncclRecv",
                        [&] { return real_fn(recvbuff, count, type, peer, comm, stream); });
}

CRYSTAL_EXPORT int ncclBroadcast(const void* sendbuff, void* recvbuff, std::size_t count,
                                 DataType type, int root, NcclComm comm, Stream stream) {
  CRYSTAL_REAL(BroadcastFn, ncclBroadcast);
  if (const auto m = ci::findMapped(comm)) root = ci::targetRoot(*m, root);
  return withMirror(
      "ncclBroadcast",
      [&] { return ci::mirrorBroadcast(sendbuff, recvbuff, count, type, root, comm, stream); },
      [&] {
        return ci::withPacing(
            comm, stream, "ncclBroadcast",
            [&] { return real_fn(sendbuff, recvbuff, count, type, root, comm, stream); }, root);
      });
}

CRYSTAL_EXPORT int ncclReduce(const void* sendbuff, void* recvbuff, std::size_t count,
                              DataType type, RedOp op, int root, NcclComm comm, Stream stream) {
  CRYSTAL_REAL(ReduceFn, ncclReduce);
  if (const auto m = ci::findMapped(comm)) root = ci::targetRoot(*m, root);
  return withMirror(
      "ncclReduce",
      [&]() -> Mirror {
        const auto rec = ci::findComm(comm);
        if (!rec || rec->rank != root) return std::nullopt;  // the result is the root's only
        return ci::mirrorReduction(sendbuff, recvbuff, count, type, op, comm, stream);
      },
      [&] {
        return ci::withPacing(
            comm, stream, "ncclReduce",
            [&] { return real_fn(sendbuff, recvbuff, count, type, op, root, comm, stream); }, root);
      });
}

// NCCL's in-place form (PyTorch's ProcessGroupNCCL::broadcast calls it): NCCL 2.28 defines it
// as ncclBroadcast(buff, buff, ...) (collectives.cc), so it takes the same path here, once.
CRYSTAL_EXPORT int ncclBcast(void* buff, std::size_t count, DataType type, int root,
                             NcclComm comm, Stream stream) {
  return ncclBroadcast(buff, buff, count, type, root, comm, stream);
}
