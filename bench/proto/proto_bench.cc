// Cost of what a receive from a virtual sender writes, per NCCL step slot of the default
// buffer sizes (LL 64 KiB, LL128 600 KiB, Simple 2 x 512 KiB per ring post): the CPU time the
// proxy thread spends per step under each data policy (docs/plugin.md "Data policy").
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "proto_lines.h"
#include "virtual_data.h"

namespace {

using crystal::DataPolicy;
using namespace crystal::plugin;
using proto::Proto;

constexpr std::size_t kLLSlot = 524288 / 8;
constexpr std::size_t kLL128Slot = 4915200 / 8;
constexpr std::size_t kSimplePost = 2 * (4u << 20) / 8;

std::size_t slotBytes(Proto p) {
  return p == Proto::LL ? kLLSlot : p == Proto::LL128 ? kLL128Slot : kSimplePost;
}

// One receive's delivery (time per iteration = proxy CPU time per step): policy x protocol.
// Mirror copies from a send buffer of the same protocol that is still outstanding (read
// live, no kept copy); zero and none have no mirror channel, as in the plugin.
void BM_Deliver(benchmark::State& state) {
  const auto policy = static_cast<DataPolicy>(state.range(0));
  const auto p = static_cast<Proto>(state.range(1));
  const std::size_t bytes = slotBytes(p);
  std::vector<std::uint64_t> src(bytes / 8, 0x1234), dst(bytes / 8, 0);
  MirrorChannel m;
  m.attachReceiver();
  MirrorChannel* mirror = policy == DataPolicy::Mirror ? &m : nullptr;
  std::uint64_t k = 0;
  for (auto _ : state) {
    if (mirror) mirror->sendPosted(k, p, src.data(), bytes);
    deliverVirtualData(policy, mirror, k, p, dst.data(), bytes, k);
    if (mirror) mirror->sendDone(k);
    benchmark::DoNotOptimize(dst.data());
    ++k;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.SetLabel(std::string(dataPolicyName(policy)) + (p == Proto::LL      ? " LL"
                                                        : p == Proto::LL128 ? " LL128"
                                                                            : " Simple"));
}
BENCHMARK(BM_Deliver)->ArgsProduct({{0, 1, 2}, {0, 1, 2}});

// Mirror when the real rank's send completed before the receive: one more copy (kept bytes).
void BM_MirrorKeptCopy(benchmark::State& state) {
  const auto p = static_cast<Proto>(state.range(0));
  const std::size_t bytes = slotBytes(p);
  std::vector<std::uint64_t> src(bytes / 8, 0x1234), dst(bytes / 8, 0);
  MirrorChannel m;
  m.attachReceiver();
  std::uint64_t k = 0;
  auto one = [&] {
    m.sendPosted(k, p, src.data(), bytes);
    m.sendDone(k);
    deliverVirtualData(DataPolicy::Mirror, &m, k, p, dst.data(), bytes, k);
    ++k;
  };
  // Touch every kept-copy buffer once: steady state, not first-use page faults.
  for (int i = 0; i < MirrorChannel::kDepth; ++i) one();
  for (auto _ : state) {
    one();
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_MirrorKeptCopy)->Arg(0)->Arg(1)->Arg(2);

// Mirror of a ring all-gather: each receive of a loop carries the same source send (the
// real rank's first step), so a slot that already holds it is not copied again: Simple
// writes nothing, LL/LL128 only their flags. Compare with BM_Deliver's mirror rows (a copy
// per step): the all-gather's proxy cost per step once every slot holds its source.
void BM_MirrorAllGatherInPlace(benchmark::State& state) {
  const auto p = static_cast<Proto>(state.range(0));
  const std::size_t bytes = slotBytes(p);
  std::vector<std::uint64_t> src(bytes / 8, 0x1234), dst(bytes / 8, 0);
  MirrorChannel m;
  m.attachReceiver();
  m.sendPosted(0, p, src.data(), bytes, false, /*source=*/true);
  m.sendDone(0);  // kept: the send completed long before the later steps
  MirrorChannel::Placed placed;
  std::uint64_t step = 0;
  for (auto _ : state) {
    deliverVirtualData(DataPolicy::Mirror, &m, 0, p, dst.data(), bytes, step++, &placed);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_MirrorAllGatherInPlace)->Arg(0)->Arg(1)->Arg(2);

void BM_StepTracker(benchmark::State& state) {
  proto::StepTracker t;
  int slot = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(t.next(slot));
    slot = (slot + 1) % proto::kSteps;
  }
}
BENCHMARK(BM_StepTracker);

}  // namespace
BENCHMARK_MAIN();
