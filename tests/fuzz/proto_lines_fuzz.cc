// Fuzzes the receive data path of virtual senders (plugin/proto_lines.h, virtual_data.h):
// arbitrary slot sequences, sizes, protocols and policies. Invariants: the step tracker's
// steps increase and sit in their slot; every whole LL line written carries the step's two
// flags, every LL128 line its 64-bit flag; nothing is written outside the buffer (ASan).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "plugin/proto_lines.h"
#include "plugin/virtual_data.h"

using namespace crystal::plugin;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  proto::StepTracker tracker;
  MirrorChannel mirror;
  mirror.attachReceiver();
  std::vector<std::uint64_t> send(64), recv(64);  // 512 B: 32 LL lines / 4 LL128 lines
  std::uint64_t k = 0;
  for (std::size_t i = 0; i + 3 <= size; i += 3) {
    const int slot = data[i] % 9;  // 8 is out of range on purpose
    const auto p = static_cast<proto::Proto>(data[i + 1] % 3);
    const auto policy = static_cast<crystal::DataPolicy>((data[i + 1] / 3) % 3);
    const std::size_t bytes = (data[i + 2] * 2u) % 513u;
    const auto prev = tracker.last();
    const auto step = tracker.next(slot);
    if (!step) {
      if (slot < proto::kSteps || tracker.last() != prev) std::abort();
      continue;
    }
    if (*step % proto::kSteps != static_cast<std::uint64_t>(slot)) std::abort();
    if (prev && !(*step > *prev && *step - *prev <= proto::kSteps)) std::abort();
    for (std::size_t w = 0; w < send.size(); ++w) send[w] = (k << 8) + w;
    if (data[i + 2] & 1) mirror.sendPosted(k, p, send.data(), bytes);
    if (data[i + 2] & 2) mirror.sendDone(k);
    (void)deliverVirtualData(policy, &mirror, k, p, recv.data(), bytes, *step);
    const auto* b = reinterpret_cast<const unsigned char*>(recv.data());
    if (p == proto::Proto::LL) {
      for (std::size_t l = 0; l < bytes / proto::kLLLine; ++l) {
        std::uint32_t f1, f2;
        std::memcpy(&f1, b + l * 16 + 4, 4);
        std::memcpy(&f2, b + l * 16 + 12, 4);
        if (f1 != proto::llFlag(*step) || f2 != proto::llFlag(*step)) std::abort();
      }
    } else if (p == proto::Proto::LL128) {
      for (std::size_t l = 0; l < bytes / proto::kLL128Line; ++l)
        if (recv[l * 16 + 15] != proto::ll128Flag(*step)) std::abort();
    }
    ++k;
  }
  return 0;
}
