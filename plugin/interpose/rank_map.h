// The program's world mapped onto the target's (docs/nccl-tests.md, "The rank mapping").
//
// A program written for k GPUs (NCCL-tests, a small script) runs unchanged on k real ranks;
// CRYSTAL_RANK_MAP="N:r0,r1,...,r(k-1)" (set by `crystal emulate` from emulation.map_comms
// and emulation.real_ranks) makes every communicator it creates with k ranks the target's
// N-rank one, its rank i being target rank r_i. The program keeps its own view: the
// interposer answers ncclCommCount = k and ncclCommUserRank = i, maps peers and roots i ->
// r_i, and scales the per-rank block of all-gather, reduce-scatter and all-to-all by k/N so
// NCCL moves what the N-rank call moves at the program's buffer size, inside its buffers.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plugin/interpose/real_nccl.h"

namespace crystal::interpose {

inline constexpr const char* kEnvRankMap = "CRYSTAL_RANK_MAP";

struct RankMap {
  int target_nranks = 0;        // N
  std::vector<int> real_ranks;  // r_i for program rank i; k = size()
};

// "N:r0,r1,..." -> map; throws InputError naming CRYSTAL_RANK_MAP and the bad part (N < 1,
// a rank outside 0..N-1 or repeated, more real ranks than N, not a number).
[[nodiscard]] RankMap parseRankMap(std::string_view text);

// One communicator's two views.
struct MappedComm {
  int program_nranks = 0;                              // k
  int program_rank = 0;                                // i
  int target_nranks = 0;                               // N
  int target_rank = 0;                                 // r_i
  std::shared_ptr<const std::vector<int>> real_ranks;  // shared: looked up on every call
};

// What ncclCommInitRank* should be called with: (nranks, rank) unchanged when no map is set
// or nranks is not k; else (N, r_rank) and `mapped` filled. Returns an NCCL error code (and
// prints why) for a bad CRYSTAL_RANK_MAP or a rank outside 0..k-1.
struct InitArgs {
  int nranks = 0;
  int rank = 0;
  std::optional<MappedComm> mapped;
};
[[nodiscard]] int mapInitArgs(int nranks, int rank, InitArgs& out, const char* caller) noexcept;

void rememberMapped(NcclComm comm, const MappedComm& m) noexcept;
void forgetMapped(NcclComm comm) noexcept;
// The mapping of `comm`, if it was created mapped. Cheap when no map was ever made.
[[nodiscard]] std::optional<MappedComm> findMapped(NcclComm comm) noexcept;

// Program peer/root j of a mapped comm -> target rank: r_j. A p2p with oneself (the only
// neighbour a 1-rank program has) goes to the target's ring neighbours: sends to r_i+1,
// receives from r_i-1 (mod N), as NCCL-tests' sendrecv does on N ranks. -1 if j is not a
// program rank (NCCL then reports the invalid peer itself).
[[nodiscard]] int targetPeer(const MappedComm& m, int peer, bool is_send) noexcept;
[[nodiscard]] int targetRoot(const MappedComm& m, int root) noexcept;

}  // namespace crystal::interpose
