// Colors and keys of virtual ranks in ncclCommSplit. NCCL cannot reveal them (they are the
// application's choice), the real ranks report only their own, so the user states the
// grouping of each split of the world communicator, in order:
//   block:N   groups of N consecutive ranks   (color of rank v = v / N)  e.g. TP groups
//   stride:N  ranks equal modulo N            (color of rank v = v % N)  e.g. DP groups
//   same      one group: every rank in the real rank's group            (a dup)
//   none      virtual ranks take no part (NCCL_SPLIT_NOCOLOR)
// The k-th split of a root-created communicator follows rule k; splits past the list, and
// splits of split children, follow `same`. A virtual rank whose group holds a real rank takes
// that real rank's color (NCCL hashes it into the child's id) and the same key convention
// (key = its rank if the real rank used its own rank as key, else the real rank's key).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace crystal::control {

struct SplitRule {
  enum class Kind { Block, Stride, Same, None } kind = Kind::Same;
  int n = 0;
};

// Parses "block:8,stride:8,same". Throws InputError naming the bad item.
[[nodiscard]] std::vector<SplitRule> parseSplitRules(std::string_view text);

// What one real rank said for one split of one parent.
struct RealSplitChoice {
  int parent_rank = -1;
  int color = 0;
  int key = 0;
};

// Decides virtual ranks' {color, key} per (parent, split index) from the rules and the real
// ranks' choices. Not thread-safe; the caller locks.
class SplitPlanner {
 public:
  explicit SplitPlanner(std::vector<SplitRule> rules) : rules_(std::move(rules)) {}

  void markRootComm(std::uint64_t hash) { root_comms_[hash] = true; }
  void recordReal(std::uint64_t parent_hash, int split_index, RealSplitChoice choice);

  struct Choice {
    int color = -1;
    int key = 0;
  };
  [[nodiscard]] Choice choose(std::uint64_t parent_hash, int split_index, int parent_rank) const;

 private:
  [[nodiscard]] SplitRule ruleFor(std::uint64_t parent_hash, int split_index) const;
  [[nodiscard]] static long groupOf(const SplitRule& r, int rank);

  std::vector<SplitRule> rules_;
  std::map<std::uint64_t, bool> root_comms_;
  std::map<std::pair<std::uint64_t, int>, std::vector<RealSplitChoice>> real_;
};

}  // namespace crystal::control
