// NCCL 2.28.9's serialized topology XML ("slot"), as one rank sends it to the ranks on its host.
//
// During init, ncclTopoGetSystem (graph/topo.cc) detects only the rank's own GPU, trims the XML
// and swaps it with the other same-host ranks through bootstrapIntraNodeAllGather, one
// xmlMemSize(NCCL_TOPO_XML_MAX_NODES = 256) slot per rank; every rank then fuses all slots.
// The emulation host receives the real rank's slot and answers, for each virtual rank V on that
// node, a clone in which V's GPU replaces the real one (docs/research/nccl-2.28.9-p2p-virtual-
// peers.md §1, §9.3). Layout (x86_64, graph/xml.h at dbc86fd0): struct ncclXml {int maxIndex,
// maxNodes; ncclXmlNode nodes[256]}; ncclTopoConvertXml(..., exp=1) has turned each sub pointer
// into the child's byte offset from &nodes[0] and each parent pointer into that offset + 1
// (0 = none). Slots are untrusted bytes: every read is bounds-checked, pointers are read as
// 8-byte integers, and anything malformed throws crystal::ProtocolError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace crystal::host::topo_xml {

inline constexpr std::size_t kNodeBytes = 10008;  // sizeof(struct ncclXmlNode)
inline constexpr int kMaxNodes = 256;             // NCCL_TOPO_XML_MAX_NODES (graph/topo.h)
inline constexpr std::size_t kSlotBytes = 8 + kNodeBytes * kMaxNodes;  // 2,562,056

// struct ncclXmlNode field offsets: MAX_STR_LEN 255, MAX_ATTR_COUNT 16 (+1 spare), MAX_SUBS 128.
inline constexpr std::size_t kStrBytes = 256;  // name, key and value: NUL-terminated in 256 B
inline constexpr int kMaxAttrs = 17;
inline constexpr int kMaxSubs = 128;
inline constexpr std::size_t kNameOffset = 0;
inline constexpr std::size_t kAttrsOffset = 256;  // attrs[a].key at +512a, .value at +512a+256
inline constexpr std::size_t kAttrBytes = 2 * kStrBytes;
inline constexpr std::size_t kNAttrsOffset = 8960;
inline constexpr std::size_t kTypeOffset = 8964;
inline constexpr std::size_t kParentOffset = 8968;
inline constexpr std::size_t kSubsOffset = 8976;
inline constexpr std::size_t kNSubsOffset = 10000;
inline constexpr std::size_t kNodesOffset = 8;  // offsetof(struct ncclXml, nodes)
static_assert(kAttrsOffset + kMaxAttrs * kAttrBytes == kNAttrsOffset);
static_assert(kSubsOffset + kMaxSubs * 8 == kNSubsOffset && kNSubsOffset + 8 == kNodeBytes);
static_assert(kSlotBytes == 2'562'056);

// NCCL's int64ToBusId (misc/utils.cc): "%04lx:%02lx:%02lx.%01lx" of id>>20, (id&0xff000)>>12,
// (id&0xff0)>>4 and id&0xf, lower case; 0x18000 -> "0000:18:00.0".
[[nodiscard]] std::string busIdText(std::int64_t bus_id);

// What the host needs to know about the real rank's GPU in a slot. Node numbers index
// nodes[]; NVLink numbers add up the `count` of the GPU's nvlink children, split by `tclass`
// as ncclTopoAddNvLinks classifies it (0x03... a GPU; 0x068001 the CPU; anything else the one
// shared NVSwitch node), so nvlinks >= nvlinks_to_nvswitch + nvlinks_to_gpu.
struct GpuInSlot {
  int node = -1;      // the `gpu` node
  int pci_node = -1;  // its parent `pci` node
  std::string busid;  // that pci node's `busid`
  int dev = -1;
  int rank = -1;
  int nvlinks = 0;
  int nvlinks_to_nvswitch = 0;
  int nvlinks_to_gpu = 0;
};

// Validates the whole slot (sizes, counts, terminated strings, offsets, parent/sub agreement,
// a `system` root at nodes[0]) and finds the `gpu` node reachable from that root whose `rank`
// is real_rank. Nodes that NCCL's trim unlinked stay in nodes[] but are not reachable, so they
// are never matched. Throws ProtocolError naming the node and field that is wrong.
[[nodiscard]] GpuInSlot findGpu(std::span<const std::byte> slot, int real_rank);

// A copy of `slot` in which real_rank's GPU becomes virtual rank `rank`: gpu.rank = rank,
// gpu.dev = dev and the parent pci's busid = busIdText(bus_id), each written NUL-padded over
// its 256-byte value field; every other byte is copied unchanged, so the clone's cpu, bridges,
// NVSwitch links and NICs fuse with the real rank's. Refuses a GPU with an nvlink child of
// GPU class (tclass 0x03...): it names one of the real machine's GPUs, absent from the fused
// topology. Also refuses rank < 0, dev < 0 and bus_id < 0.
[[nodiscard]] std::vector<std::byte> cloneSlotFor(std::span<const std::byte> slot, int real_rank,
                                                  int rank, int dev, std::int64_t bus_id);

// Builder for tests and fuzz seeds (topo_xml_build.cc): the slot an x86 H200 rank would send,
// in NCCL's node order and attribute order, after trim (so without `keep`):
//   system{version} > cpu{host_hash, numaid, affinity, arch, vendor, familyid, modelid}
//     > pci{busid, class, vendor, device, subsystem_*, link_speed, link_width}
//       > gpu{dev, sm, rank, gdr} [> nvlink{target, count=18, tclass=0x068000}]
//                                 [> nvlink{target, count=4, tclass=0x030200}]
//     > nic > net{name, dev, latency, speed, port, guid, maxconn, gdr}
struct SlotSpec {
  int rank = 0;
  int dev = 0;
  std::int64_t bus_id = 0x18000;
  bool nvswitch = true;        // an NVSwitch nvlink child
  bool gpu_peer_link = false;  // a GPU-class nvlink child (which cloneSlotFor refuses)
};
[[nodiscard]] std::vector<std::byte> buildSlot(const SlotSpec& spec);

}  // namespace crystal::host::topo_xml
