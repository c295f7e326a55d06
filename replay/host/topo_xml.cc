#include "topo_xml.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>

#include "crystal/base/error.h"

namespace crystal::host::topo_xml {
namespace {

using Bytes = std::span<const std::byte>;

[[nodiscard]] std::size_t nodeBase(int k) {
  return kNodesOffset + static_cast<std::size_t>(k) * kNodeBytes;
}

[[nodiscard]] std::int32_t readI32(Bytes s, std::size_t off) {
  std::int32_t v = 0;
  std::memcpy(&v, s.data() + off, sizeof v);
  return v;
}

// Pointers arrive as offsets (ncclTopoConvertXml), so they are plain 8-byte integers here.
[[nodiscard]] std::uint64_t readU64(Bytes s, std::size_t off) {
  std::uint64_t v = 0;
  std::memcpy(&v, s.data() + off, sizeof v);
  return v;
}

[[nodiscard]] ProtocolError slotError(const std::string& what) {
  return ProtocolError("topology XML slot: " + what);
}

// NCCL reads names, keys and values with strcmp, so each needs its NUL inside its 256 bytes.
// `what`/`a` describe the field for the error only, so the happy path formats nothing.
[[nodiscard]] std::string_view field(Bytes s, std::size_t off, int k, const char* what, int a) {
  const char* p = reinterpret_cast<const char*>(s.data() + off);
  const void* nul = std::memchr(p, 0, kStrBytes);
  if (nul == nullptr)
    throw slotError(fmt::format("node {} {}{} has no NUL within {} bytes", k, what,
                                a < 0 ? std::string() : fmt::format(" of attribute {}", a),
                                kStrBytes));
  return {p, static_cast<std::size_t>(static_cast<const char*>(nul) - p)};
}

struct Attr {
  std::string_view key, value;
  std::size_t value_offset = 0;  // in the slot
};

struct Node {
  std::string_view name;
  std::vector<Attr> attrs;
  int parent = -1;
  std::vector<int> subs;

  // xmlGetAttrIndex takes the first attribute with that key.
  [[nodiscard]] const Attr* attr(std::string_view key) const {
    for (const auto& a : attrs)
      if (a.key == key) return &a;
    return nullptr;
  }
};

[[nodiscard]] std::vector<Node> parse(Bytes slot) {
  if (slot.size() != kSlotBytes)
    throw slotError(fmt::format("{} bytes, expected {}", slot.size(), kSlotBytes));
  const std::int32_t max_index = readI32(slot, 0), max_nodes = readI32(slot, 4);
  if (max_nodes != kMaxNodes)
    throw slotError(fmt::format("maxNodes {}, expected {}", max_nodes, kMaxNodes));
  if (max_index <= 0 || max_index > max_nodes)
    throw slotError(fmt::format("maxIndex {} outside 1..{}", max_index, max_nodes));
  const std::uint64_t span_bytes = static_cast<std::uint64_t>(max_index) * kNodeBytes;
  std::vector<Node> nodes(static_cast<std::size_t>(max_index));
  for (int k = 0; k < max_index; ++k) {
    const std::size_t base = nodeBase(k);
    Node& n = nodes[static_cast<std::size_t>(k)];
    n.name = field(slot, base + kNameOffset, k, "name", -1);
    const std::int32_t n_attrs = readI32(slot, base + kNAttrsOffset);
    if (n_attrs < 0 || n_attrs > kMaxAttrs)
      throw slotError(
          fmt::format("node {} ({}) has nAttrs {} outside 0..{}", k, n.name, n_attrs, kMaxAttrs));
    for (int a = 0; a < n_attrs; ++a) {
      const std::size_t at = base + kAttrsOffset + static_cast<std::size_t>(a) * kAttrBytes;
      n.attrs.push_back({field(slot, at, k, "key", a), field(slot, at + kStrBytes, k, "value", a),
                         at + kStrBytes});
    }
    const std::int32_t n_subs = readI32(slot, base + kNSubsOffset);
    if (n_subs < 0 || n_subs > kMaxSubs)
      throw slotError(
          fmt::format("node {} ({}) has nSubs {} outside 0..{}", k, n.name, n_subs, kMaxSubs));
    for (int s = 0; s < n_subs; ++s) {
      const std::uint64_t off = readU64(slot, base + kSubsOffset + 8 * static_cast<std::size_t>(s));
      if (off % kNodeBytes != 0 || off >= span_bytes)
        throw slotError(fmt::format("node {} ({}) sub {} has offset {}, not a node below {}", k,
                                    n.name, s, off, max_index));
      n.subs.push_back(static_cast<int>(off / kNodeBytes));
    }
    // Serialized parents are offset + 1, so that node 0 differs from "no parent".
    const std::uint64_t parent = readU64(slot, base + kParentOffset);
    if (parent != 0) {
      if ((parent - 1) % kNodeBytes != 0 || parent - 1 >= span_bytes)
        throw slotError(fmt::format("node {} ({}) has parent {}, not a node below {} (+1)", k,
                                    n.name, parent, max_index));
      n.parent = static_cast<int>((parent - 1) / kNodeBytes);
      if (n.parent == k) throw slotError(fmt::format("node {} ({}) is its own parent", k, n.name));
    }
  }
  // NCCL's trim unlinks a node from its parent's subs but leaves its own parent behind, so only
  // this direction must hold.
  for (int k = 0; k < max_index; ++k)
    for (int j : nodes[static_cast<std::size_t>(k)].subs)
      if (nodes[static_cast<std::size_t>(j)].parent != k)
        throw slotError(fmt::format("node {} lists node {} as a sub, whose parent is node {}", k, j,
                                    nodes[static_cast<std::size_t>(j)].parent));
  if (nodes[0].parent != -1 || nodes[0].name != "system")
    throw slotError(fmt::format("node 0 is '{}', not a parentless system root", nodes[0].name));
  return nodes;
}

// The nodes that fusion copies: the tree under nodes[0], each node once.
[[nodiscard]] std::vector<int> reachable(const std::vector<Node>& nodes) {
  std::vector<bool> seen(nodes.size());
  std::vector<int> order, stack{0};
  while (!stack.empty()) {
    const int k = stack.back();
    stack.pop_back();
    if (seen[static_cast<std::size_t>(k)])
      throw slotError(fmt::format("node {} is listed twice as a sub", k));
    seen[static_cast<std::size_t>(k)] = true;
    order.push_back(k);
    const auto& subs = nodes[static_cast<std::size_t>(k)].subs;
    stack.insert(stack.end(), subs.rbegin(), subs.rend());
  }
  return order;
}

// NCCL writes these with "%d"; anything else is not a slot NCCL made.
[[nodiscard]] int intAttr(const Node& n, int k, std::string_view key) {
  const Attr* a = n.attr(key);
  if (a == nullptr) throw slotError(fmt::format("{} node {} has no {}", n.name, k, key));
  int v = 0;
  const auto [end, ec] = std::from_chars(a->value.data(), a->value.data() + a->value.size(), v);
  if (ec != std::errc() || end != a->value.data() + a->value.size())
    throw slotError(
        fmt::format("{} node {} has {} '{}', not an integer", n.name, k, key, a->value));
  return v;
}

struct Found {
  GpuInSlot gpu;
  std::size_t rank_value = 0, dev_value = 0, busid_value = 0;
  std::optional<std::string> gpu_target;  // the first GPU-class nvlink target
};

[[nodiscard]] Found locate(Bytes slot, int real_rank) {
  const auto nodes = parse(slot);
  Found f;
  for (int k : reachable(nodes)) {
    const Node& n = nodes[static_cast<std::size_t>(k)];
    if (n.name != "gpu" || n.attr("rank") == nullptr) continue;  // NCCL skips rank-less GPUs
    if (intAttr(n, k, "rank") != real_rank) continue;
    if (f.gpu.node >= 0)
      throw slotError(
          fmt::format("gpu nodes {} and {} both have rank {}", f.gpu.node, k, real_rank));
    f.gpu.node = k;
  }
  if (f.gpu.node < 0) throw slotError(fmt::format("no gpu node with rank {}", real_rank));
  const Node& gpu = nodes[static_cast<std::size_t>(f.gpu.node)];
  const Node* pci = gpu.parent < 0 ? nullptr : &nodes[static_cast<std::size_t>(gpu.parent)];
  const Attr* busid = pci == nullptr ? nullptr : pci->attr("busid");
  if (pci == nullptr || pci->name != "pci" || busid == nullptr)
    throw slotError(
        fmt::format("gpu node {} (rank {}) has no pci parent with a busid", f.gpu.node, real_rank));
  f.gpu.pci_node = gpu.parent;
  f.gpu.busid = std::string(busid->value);
  f.busid_value = busid->value_offset;
  f.gpu.rank = real_rank;
  f.rank_value = gpu.attr("rank")->value_offset;
  f.gpu.dev = intAttr(gpu, f.gpu.node, "dev");
  f.dev_value = gpu.attr("dev")->value_offset;
  for (int s : gpu.subs) {
    const Node& link = nodes[static_cast<std::size_t>(s)];
    if (link.name != "nvlink") continue;
    const int count = intAttr(link, s, "count");  // ncclTopoAddNvLinks requires count and tclass
    if (count < 0 || count > 0xffff)
      throw slotError(fmt::format("nvlink node {} has count {}", s, count));
    const Attr* tclass = link.attr("tclass");
    if (tclass == nullptr) throw slotError(fmt::format("nvlink node {} has no tclass", s));
    f.gpu.nvlinks += count;
    // kvDictPciClass prefixes: 0x03 is a GPU, 0x068001 the local CPU, the rest NVSwitch.
    if (tclass->value.starts_with("0x03")) {
      f.gpu.nvlinks_to_gpu += count;
      const Attr* target = link.attr("target");
      if (!f.gpu_target) f.gpu_target = target ? std::string(target->value) : "?";
    } else if (!tclass->value.starts_with("0x068001")) {
      f.gpu.nvlinks_to_nvswitch += count;
    }
  }
  return f;
}

// Writes `text` NUL-padded over a 256-byte value field (the old value may be longer).
void putValue(std::vector<std::byte>& out, std::size_t off, const std::string& text) {
  std::memset(out.data() + off, 0, kStrBytes);
  std::memcpy(out.data() + off, text.data(), std::min(text.size(), kStrBytes - 1));
}

}  // namespace

std::string busIdText(std::int64_t bus_id) {
  // %lx prints the arithmetic shift's two's complement, hence the cast.
  return fmt::format("{:04x}:{:02x}:{:02x}.{:01x}", static_cast<std::uint64_t>(bus_id >> 20),
                     (bus_id & 0xff000) >> 12, (bus_id & 0xff0) >> 4, bus_id & 0xf);
}

GpuInSlot findGpu(std::span<const std::byte> slot, int real_rank) {
  return locate(slot, real_rank).gpu;
}

std::vector<std::byte> cloneSlotFor(std::span<const std::byte> slot, int real_rank, int rank,
                                    int dev, std::int64_t bus_id) {
  if (rank < 0 || dev < 0 || bus_id < 0)
    throw ProtocolError(fmt::format("topology XML clone: rank {}, dev {}, busId {:#x} must be >= 0",
                                    rank, dev, bus_id));
  const Found f = locate(slot, real_rank);
  if (f.gpu_target)
    throw slotError(fmt::format(
        "rank {}'s GPU has an NVLink to GPU {}; a virtual rank's clone would name a GPU that is "
        "not in the fused topology (link it to an NVSwitch, tclass 0x068000, instead)",
        real_rank, *f.gpu_target));
  std::vector<std::byte> out(slot.begin(), slot.end());
  putValue(out, f.rank_value, std::to_string(rank));
  putValue(out, f.dev_value, std::to_string(dev));
  putValue(out, f.busid_value, busIdText(bus_id));
  return out;
}

}  // namespace crystal::host::topo_xml
