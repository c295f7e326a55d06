// buildSlot: a slot shaped like the one an x86 H200 rank of NCCL 2.28.9 sends, for tests and
// fuzz seeds. Nodes and attributes appear in the order NCCL creates them (topo.cc
// ncclTopoGetSystem → xml.cc ncclTopoFillGpu → ncclTopoPopulateNics → ncclTopoTrimXml), and
// pointers are already the serialized offsets, so a byte-level reader sees what it would on
// the wire. Values are typical sysfs/NVML readings, not from any one machine.
#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

#include "topo_xml.h"

namespace crystal::host::topo_xml {
namespace {

class SlotWriter {
 public:
  SlotWriter() : slot_(kSlotBytes) {}

  // xmlAddNode; parent -1 leaves the node an orphan until attach().
  int add(int parent, std::string_view name) {
    const int k = count_++;
    putStr(base(k) + kNameOffset, name);
    if (parent >= 0) attach(parent, k);
    return k;
  }

  // ncclTopoGetXmlFromSys gives a pci node made earlier its CPU (or bridge) parent.
  void attach(int parent, int child) {
    putU64(base(child) + kParentOffset, static_cast<std::uint64_t>(parent) * kNodeBytes + 1);
    const int n = getI32(base(parent) + kNSubsOffset);
    putU64(base(parent) + kSubsOffset + 8 * static_cast<std::size_t>(n),
           static_cast<std::uint64_t>(child) * kNodeBytes);
    putI32(base(parent) + kNSubsOffset, n + 1);
  }

  // xmlSetAttr: overwrite the value of an existing key, else append the pair.
  void set(int k, std::string_view key, std::string_view value) {
    const int n = getI32(base(k) + kNAttrsOffset);
    int a = 0;
    while (a < n && key != reinterpret_cast<const char*>(&slot_[attr(k, a)])) ++a;
    if (a == n) {
      putStr(attr(k, a), key);
      putI32(base(k) + kNAttrsOffset, n + 1);
    }
    putStr(attr(k, a) + kStrBytes, value);
  }

  // xmlUnsetAttr, as ncclTopoTrimXml does for `keep`: later pairs shift down by strcpy, so the
  // old last pair stays behind nAttrs, as in a real slot.
  void unset(int k, std::string_view key) {
    const int n = getI32(base(k) + kNAttrsOffset);
    int a = 0;
    while (a < n && key != reinterpret_cast<const char*>(&slot_[attr(k, a)])) ++a;
    if (a == n) return;
    for (int i = a + 1; i < n; ++i)
      for (std::size_t part = 0; part < kAttrBytes; part += kStrBytes) {
        const char* from = reinterpret_cast<const char*>(&slot_[attr(k, i) + part]);
        std::memcpy(&slot_[attr(k, i - 1) + part], from, std::strlen(from) + 1);
      }
    putI32(base(k) + kNAttrsOffset, n - 1);
  }

  [[nodiscard]] std::vector<std::byte> finish() && {
    putI32(0, count_);
    putI32(4, kMaxNodes);
    return std::move(slot_);
  }

 private:
  [[nodiscard]] static std::size_t base(int k) {
    return kNodesOffset + static_cast<std::size_t>(k) * kNodeBytes;
  }
  [[nodiscard]] static std::size_t attr(int k, int a) {
    return base(k) + kAttrsOffset + static_cast<std::size_t>(a) * kAttrBytes;
  }
  // strncpy(dst, s, MAX_STR_LEN) into zeroed memory: NUL-padded.
  void putStr(std::size_t off, std::string_view s) {
    std::memset(&slot_[off], 0, kStrBytes);
    std::memcpy(&slot_[off], s.data(), std::min(s.size(), kStrBytes - 1));
  }
  void putI32(std::size_t off, std::int32_t v) { std::memcpy(&slot_[off], &v, sizeof v); }
  void putU64(std::size_t off, std::uint64_t v) { std::memcpy(&slot_[off], &v, sizeof v); }
  [[nodiscard]] std::int32_t getI32(std::size_t off) const {
    std::int32_t v = 0;
    std::memcpy(&v, &slot_[off], sizeof v);
    return v;
  }

  std::vector<std::byte> slot_;
  int count_ = 0;
};

}  // namespace

std::vector<std::byte> buildSlot(const SlotSpec& spec) {
  SlotWriter w;
  const int system = w.add(-1, "system");
  w.set(system, "version", "1");
  // ncclTopoGetPciNode makes the GPU's pci node first, parentless; ncclTopoFillGpu's class
  // placeholder is then replaced by sysfs's full class.
  const int pci = w.add(-1, "pci");
  w.set(pci, "busid", busIdText(spec.bus_id));
  w.set(pci, "class", "0x03");
  w.set(pci, "class", "0x030200");
  w.set(pci, "vendor", "0x10de");
  w.set(pci, "device", "0x2335");
  w.set(pci, "subsystem_vendor", "0x10de");
  w.set(pci, "subsystem_device", "0x18be");
  w.set(pci, "link_speed", "32.0 GT/s PCIe");
  w.set(pci, "link_width", "16");
  // Its root complex: a cpu under system, filled by ncclTopoGetXmlFromCpu after the link.
  const int cpu = w.add(system, "cpu");
  w.set(cpu, "host_hash", "0x5eed0000c0ffee11");
  w.set(cpu, "numaid", "0");
  w.attach(cpu, pci);
  w.set(cpu, "affinity", "00000000,0000ffff,ffffffff");
  w.set(cpu, "arch", "x86_64");
  w.set(cpu, "vendor", "GenuineIntel");
  w.set(cpu, "familyid", "6");
  w.set(cpu, "modelid", "143");
  // ncclTopoGetXmlFromGpu: NVML index and compute capability, then one nvlink node per remote
  // busId; an NVSwitch's remote busId is hidden, so the target stays NVML's placeholder.
  const int gpu = w.add(pci, "gpu");
  w.set(gpu, "dev", std::to_string(spec.dev));
  w.set(gpu, "sm", "90");
  if (spec.nvswitch) {
    const int l = w.add(gpu, "nvlink");
    w.set(l, "target", "fffffff:ffff:ff");
    w.set(l, "count", "18");
    w.set(l, "tclass", "0x068000");
  }
  if (spec.gpu_peer_link) {
    const int l = w.add(gpu, "nvlink");
    w.set(l, "target", busIdText(spec.bus_id + 0x1000));
    w.set(l, "count", "4");
    w.set(l, "tclass", "0x030200");
  }
  // ncclTopoGetSystem marks its own GPU.
  w.set(gpu, "keep", "1");
  w.set(gpu, "rank", std::to_string(spec.rank));
  w.set(gpu, "gdr", "1");
  // ncclTopoPopulateNics: crystal's plugin gives no pciPath, so the NIC hangs off the first CPU.
  const int nic = w.add(cpu, "nic");
  const int net = w.add(nic, "net");
  w.set(net, "name", "crystal0");
  w.set(net, "keep", "1");
  w.set(net, "dev", "0");
  w.set(net, "latency", "0");
  w.set(net, "speed", "400000");
  w.set(net, "port", "1");
  w.set(net, "guid", "0x1");
  w.set(net, "maxconn", "65536");
  w.set(net, "gdr", "1");
  // ncclTopoTrimXml drops every keep before the slot is sent.
  w.unset(gpu, "keep");
  w.unset(net, "keep");
  return std::move(w).finish();
}

}  // namespace crystal::host::topo_xml
