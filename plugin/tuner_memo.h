// The tuner's answers remembered per communicator. NCCL asks getCollInfo once per collective
// on the thread that enqueues it, and the model's answer for one (function, size) never
// changes: the cost table, the pick and its channel count took ~0.65 us a call (two model
// evaluations, three for an entry NCCL_PROTO forced), a lookup here ~30 ns. Training asks
// the same few sizes every iteration.
//
// The answer also depends on which entries NCCL marked unusable (-1), so that mask is part
// of the key. What is not remembered: the ring folding's channel count (plugin/ring_fold.h),
// which reads the plugin's live state (a comm's rings become known at its first collective).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "crystal/live/target_model.h"
#include "crystal/nccl/tuner_v5.h"

namespace crystal::plugin {

class TunerMemo {
 public:
  // NCCL 2.28's table is 7 x 3; a larger one is not remembered (computed every call).
  static constexpr int kMaxEntries = 32;
  // Distinct (function, size, mask) kept before the memo starts over: a program that asks
  // every size once does not grow it without bound.
  static constexpr std::size_t kMaxKeys = 4096;

  // applyTargetCosts(m, f, bytes, shape, table, numAlgo, numProto, nChannels), answered from
  // the memo when this (f, bytes, mask) was asked before with the same model. Same effect on
  // `table` and `*nChannels`, same return value.
  bool apply(const live::TargetModel& m, nccl::ncclFunc_t f, std::size_t bytes,
             const model::CommShape& shape, float* table, int numAlgo, int numProto,
             int* nChannels);

  [[nodiscard]] std::size_t size() const { return answers_.size(); }
  [[nodiscard]] std::uint64_t hits() const { return hits_; }

 private:
  struct Key {
    std::uint64_t bytes = 0;
    std::uint32_t unusable = 0;  // bit a * numProto + p: NCCL's entry was -1
    std::int16_t func = 0;
    std::int8_t algos = 0, protos = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept {
      std::uint64_t h = k.bytes * 0x9E3779B97F4A7C15ull;
      h ^= (std::uint64_t{k.unusable} << 17) ^ (std::uint64_t(k.func) << 7) ^
           (std::uint64_t(k.algos) << 3) ^ std::uint64_t(k.protos);
      return static_cast<std::size_t>(h ^ (h >> 29));
    }
  };
  struct Answer {
    bool applied = false;
    std::optional<int> channels;  // set when applyTargetCosts set *nChannels
    std::array<float, kMaxEntries> table{};
  };

  const live::TargetModel* model_ = nullptr;  // the model the answers came from
  std::unordered_map<Key, Answer, KeyHash> answers_;
  std::uint64_t hits_ = 0;
};

}  // namespace crystal::plugin
