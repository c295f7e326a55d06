// What the interposer knows and does in emulation mode (CRYSTAL_HOST set): the connection to
// the host, and the communicators this process created (comm pointer -> NCCL commHash, rank,
// size, splits so far), which ncclCommSplit needs to name its parent to the host.
//
// Every method returns an ncclResult_t value and never throws: the interposer's exported
// functions sit on NCCL's C ABI. Failures print one line on stderr that says what to fix.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "crystal/control/protocol.h"
#include "plugin/interpose/real_nccl.h"

namespace crystal::interpose {

// Environment read by the interposer (set by `crystal emulate`, or by a batch script).
inline constexpr const char* kEnvHost = "CRYSTAL_HOST";                   // HOST:PORT of the host
inline constexpr const char* kEnvTimeout = "CRYSTAL_TIMEOUT";             // seconds per host call
inline constexpr const char* kEnvHostIdPrefix = "CRYSTAL_HOSTID_PREFIX";  // NCCL_HOSTID=<p>-<pid>
inline constexpr double kDefaultTimeoutS = 60.0;

// CRYSTAL_HOST if set and non-empty: the interposer is in emulation mode.
[[nodiscard]] std::optional<std::string> hostAddress();

// The environment this process's NCCL reads under emulation, set at load and at every
// interposed entry point (a process forked or spawned by a launcher has another pid):
// NCCL_HOSTID=<CRYSTAL_HOSTID_PREFIX>-<pid> when the prefix is set, so every real process is
// its own NCCL host, and applyGraphFile.
void applyEmulationEnv() noexcept;
// CRYSTAL_GRAPH_DIR (emulation.p2p_peers; control/graph_file.h): points NCCL_GRAPH_FILE at this
// process's file there, written empty first; the host fills it for each comm.
void applyGraphFile() noexcept;

struct CommRecord {
  std::uint64_t hash = 0;
  int rank = -1;
  int nranks = 0;
  std::uint32_t splits = 0;  // NCCL's splitCount of this comm
};

// Asks the host for a unique id (the host is the bootstrap root).
[[nodiscard]] int hostUniqueId(NcclUniqueId* out, const char* caller) noexcept;
// Registers a communicator about to be created; returns its commHash through `hash`.
[[nodiscard]] int hostCommInit(const NcclUniqueId& id, int nranks, int rank, int n_ids,
                               std::uint64_t& hash, const char* caller) noexcept;
// Registers a split of `parent` about to happen; fills the parent's record (split counted).
[[nodiscard]] int hostCommSplit(NcclComm parent, int color, int key, CommRecord& parent_after,
                                std::uint64_t& child_hash, const char* caller) noexcept;
// Offers the host memory this process allocated for P2P connections to virtual node members;
// `place` says where the rank stands on its node (members 0: the host will not use it).
[[nodiscard]] int hostBlockPool(const control::BlockPool& pool, control::PoolPlace& place,
                                const char* caller) noexcept;
// Tells the host that this process's emulation stopped being faithful (plugin/fidelity.h's
// sink; control NOTE), for the run's report. Nothing without CRYSTAL_HOST; a failure is one
// stderr line.
void hostNote(const std::string& text) noexcept;
// Undoes the split count of a split that NCCL refused to start.
void uncountSplit(NcclComm parent) noexcept;

void rememberComm(NcclComm comm, const CommRecord& rec) noexcept;
void forgetComm(NcclComm comm) noexcept;
[[nodiscard]] std::optional<CommRecord> findComm(NcclComm comm) noexcept;

// One error line on stderr ("crystal: <caller>: <text>") and the NCCL code to return.
[[nodiscard]] int reportError(const char* caller, const std::string& text, int code) noexcept;

// In an interposed NCCL function `name` of type `Type`: `real_fn`, the real one (looked up
// once), or return ncclSystemError with a line saying it is missing.
#define CRYSTAL_REAL(Type, name)                                                      \
  static std::atomic<void*> slot_##name{nullptr};                                     \
  const auto real_fn = ::crystal::interpose::cachedReal<Type>(slot_##name, #name);    \
  if (real_fn == nullptr)                                                             \
  return ::crystal::interpose::reportError(#name, "the real NCCL function is unavailable", \
                                           ::crystal::interpose::kNcclSystemError)

}  // namespace crystal::interpose
