// libFuzzer target: the host's reader of NCCL 2.28.9 topology XML slots (replay/host/topo_xml.h).
// A slot is 2.5 MB, far beyond libFuzzer's usual input length, so a short input builds one:
//   data[0] even: the rest is copied over the start of a zeroed slot (header and first nodes);
//   data[0] odd:  a buildSlot() slot (bits 1 and 2 pick nvswitch / gpu_peer_link) patched by
//                 the rest as [u32 offset][u8 length][bytes] records, to reach deep fields.
// Every slot must be accepted or throw crystal::ProtocolError; an accepted GPU must clone into
// a slot whose GPU carries exactly the new rank, dev and busId.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../replay/host/topo_xml.h"
#include "crystal/base/error.h"

namespace tx = crystal::host::topo_xml;

namespace {

constexpr int kRealRank = 3;

// Fills `slot` (kept across runs: fresh 2.5 MB allocations cost more than the parse).
void fill(std::vector<std::byte>& slot, const std::uint8_t* data, std::size_t size) {
  if (data[0] % 2 == 0) {
    std::memset(slot.data(), 0, slot.size());
    std::memcpy(slot.data(), data + 1, std::min(size - 1, tx::kSlotBytes));
    return;
  }
  // Built once: building costs more than the parse under the sanitizers.
  static const std::vector<std::byte> built[4] = {
      tx::buildSlot({.rank = kRealRank, .dev = 1, .nvswitch = false}),
      tx::buildSlot({.rank = kRealRank, .dev = 1, .nvswitch = true}),
      tx::buildSlot({.rank = kRealRank, .dev = 1, .nvswitch = false, .gpu_peer_link = true}),
      tx::buildSlot({.rank = kRealRank, .dev = 1, .nvswitch = true, .gpu_peer_link = true})};
  slot = built[(data[0] >> 1) & 3];
  for (std::size_t at = 1; at + 5 <= size;) {
    std::uint32_t off = 0;
    std::memcpy(&off, data + at, 4);
    const std::size_t len = data[at + 4];
    at += 5;
    const std::size_t dst = off % tx::kSlotBytes;
    const std::size_t n = std::min({len, size - at, tx::kSlotBytes - dst});
    std::memcpy(slot.data() + dst, data + at, n);
    at += n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static std::vector<std::byte> slot(tx::kSlotBytes);
  fill(slot, data, size);
  try {
    const tx::GpuInSlot g = tx::findGpu(slot, kRealRank);
    if (g.rank != kRealRank || g.node <= 0 || g.pci_node < 0 || g.nvlinks_to_gpu < 0 ||
        g.nvlinks < g.nvlinks_to_nvswitch + g.nvlinks_to_gpu)
      std::abort();
    const std::int64_t bus = (std::int64_t{0xfffe} << 20) | (1 << 12);
    const auto clone = tx::cloneSlotFor(slot, kRealRank, 42, 7, bus);
    const tx::GpuInSlot c = tx::findGpu(clone, 42);
    if (c.node != g.node || c.pci_node != g.pci_node || c.dev != 7 || c.busid != "fffe:01:00.0" ||
        c.nvlinks != g.nvlinks)
      std::abort();
  } catch (const crystal::ProtocolError&) {
  }
  return 0;
}
