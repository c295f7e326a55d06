// What the virtual ranks of a PyTorch 2.11 job would have written into the TCPStore, and
// which keys they are the writers of. Pure rules over key names; the store (store_core.h)
// applies them. Every rule and the PyTorch source fact it rests on: docs/store.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace crystal::store {

struct JobView {
  int world_size = 0;
  std::vector<int> real_ranks;  // global ranks started for real
  // TORCH_NCCL_RANKS_PER_ROOT the real ranks run with (PyTorch's default 128); decides who
  // writes the UniqueNCCLID:<i> keys of scalable communicator init.
  int ranks_per_root = 128;
};

enum class KeyRole {
  None,            // no virtual rank ever writes this key
  UniqueId,        // an ncclUniqueId (128 bytes) written by the communicator's id root
  BarrierRelease,  // "<store_based_barrier_key:NAME>:last_worker", written by the last arrival
};

struct KeyClass {
  KeyRole role = KeyRole::None;
  // Global rank that writes the key; -1 when the key alone does not tell (a subgroup's id:
  // its first member is known only to the program).
  int writer = -1;
  std::string what;  // for messages: "default process group's ncclUniqueId", ...
};

class VirtualRanks {
 public:
  explicit VirtualRanks(JobView job);  // throws InputError on a bad world/rank list

  [[nodiscard]] const JobView& job() const noexcept { return job_; }
  [[nodiscard]] int realCount() const noexcept { return static_cast<int>(job_.real_ranks.size()); }
  [[nodiscard]] int virtualCount() const noexcept { return job_.world_size - realCount(); }
  [[nodiscard]] bool isReal(int rank) const noexcept;

  // Keys present before any real rank connects: every virtual rank has checked in
  // (TCPStore client constructor: ADD "init/" 1 each).
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> initialKeys() const;
  // The count the virtual ranks have added to a counter key by the time a real rank first
  // touches it: the world's store-based barrier (each rank ADDs 1). nullopt for other keys.
  [[nodiscard]] std::optional<std::int64_t> virtualAdds(std::string_view key) const;
  [[nodiscard]] KeyClass classify(std::string_view key) const;
  // First global rank of root block `index` of a `size`-rank communicator split among
  // ceil(size / ranks_per_root) roots (PyTorch's getRootIndex, inverted).
  [[nodiscard]] static int rootRank(int index, int size, int ranks_per_root);

 private:
  JobView job_;
  std::vector<bool> real_;  // by global rank
};

}  // namespace crystal::store
