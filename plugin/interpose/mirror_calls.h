// Data policy mirror in the interposer (plugin/mirror_result.h): which collectives get their
// result rewritten, and when, relative to NCCL's groups.
//
// A call inside ncclGroupStart/End is only enqueued on its stream at the outermost
// ncclGroupEnd, so the "after" half of a grouped call waits for that (per thread, like NCCL's
// own group depth); a group that fails, or ncclGroupSimulateEnd, cancels it. Every function
// returns an ncclResult_t value and never throws (they sit on NCCL's C ABI).
#pragma once

#include <optional>

#include "mirror_result.h"
#include "plugin/interpose/real_nccl.h"

namespace crystal::interpose {

// A broadcast from a virtual root: the real rank's own data.
[[nodiscard]] std::optional<plugin::MirrorResult> mirrorBroadcast(const void* sendbuff,
                                                                  void* recvbuff,
                                                                  std::size_t count, int type,
                                                                  int root, NcclComm comm,
                                                                  void* stream);
// A reduction whose result this rank holds: `count` elements at `source` (the real rank's
// input: for a reduce-scatter its own block) reduced by `op` over the communicator's ranks,
// into `recvbuff`. Only with one real rank in the emulation (then every other rank is a
// virtual copy of it) and CRYSTAL_MIRROR_RESULTS=1; sum and product need the mirror kernel.
[[nodiscard]] std::optional<plugin::MirrorResult> mirrorReduction(const void* source,
                                                                  void* recvbuff,
                                                                  std::size_t count, int type,
                                                                  int op, NcclComm comm,
                                                                  void* stream);

// Around NCCL's call: `before` (0, or an error code after one error line), then NCCL, then
// `after(rc)`: runs or queues the rewrite when rc is ncclSuccess, cancels it otherwise, and
// returns rc or the error of a failed rewrite.
[[nodiscard]] int mirrorBefore(const char* caller, std::optional<plugin::MirrorResult>& m);
[[nodiscard]] int mirrorAfter(const char* caller, int rc, std::optional<plugin::MirrorResult>& m);

// ncclGroupStart / ncclGroupEnd / ncclGroupSimulateEnd bookkeeping (their real calls are the
// caller's): `started` after a successful start; `ended` after an end, with its result.
void mirrorGroupStarted() noexcept;
[[nodiscard]] int mirrorGroupEnded(const char* caller, int rc, bool launched) noexcept;

// At communicator creation (`hash`: NCCL's commHash), under mirror with one real rank and
// CRYSTAL_MIRROR_RESULTS=1: loads the mirror kernel in the current CUDA context now
// (mirror_kernel.h says why; logs why not, once) and, when it is there, tells the net plugin
// that this communicator's reduction results are rewritten (PluginState::
// setResultsRewritten: its ring reductions then skip mirroring).
void mirrorCommCreated(std::uint64_t hash) noexcept;
// The program made a custom reduction op (ncclRedOpCreatePreMulSum) on `comm`: the rewrite
// does not know its scalar, so that communicator's reductions go back to the data path's
// bytes (mirrored where the plugin can).
void mirrorCustomOp(NcclComm comm) noexcept;

}  // namespace crystal::interpose
