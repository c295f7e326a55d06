// Topology XML slots (NCCL 2.28.9 ncclTopoGetSystem's intra-node all-gather): busId text,
// finding the real GPU, cloning it for a virtual rank, and refusing malformed slots.
#include "topo_xml.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "crystal/base/error.h"

namespace crystal::host::topo_xml {
namespace {

using Slot = std::vector<std::byte>;

std::size_t base(int k) { return kNodesOffset + static_cast<std::size_t>(k) * kNodeBytes; }
std::size_t attrAt(int k, int a) {
  return base(k) + kAttrsOffset + static_cast<std::size_t>(a) * kAttrBytes;
}
void putI32(Slot& s, std::size_t off, std::int32_t v) { std::memcpy(&s[off], &v, 4); }
void putU64(Slot& s, std::size_t off, std::uint64_t v) { std::memcpy(&s[off], &v, 8); }
std::int32_t getI32(const Slot& s, std::size_t off) {
  std::int32_t v = 0;
  std::memcpy(&v, &s[off], 4);
  return v;
}
std::string str(const Slot& s, std::size_t off) { return reinterpret_cast<const char*>(&s[off]); }

// Node numbers of buildSlot's layout (NCCL's creation order).
constexpr int kSystem = 0, kPci = 1, kCpu = 2, kGpu = 3, kNvlink = 4;

std::size_t valueAt(const Slot& s, int k, const std::string& key) {
  for (int a = 0; a < getI32(s, base(k) + kNAttrsOffset); ++a)
    if (str(s, attrAt(k, a)) == key) return attrAt(k, a) + kStrBytes;
  ADD_FAILURE() << "node " << k << " has no " << key;
  return 0;
}

template <typename F>
void expectRefused(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

void expectFindRefused(const Slot& s, const std::string& needle) {
  expectRefused([&] { (void)findGpu(s, 3); }, needle);
}

Slot built() { return buildSlot({.rank = 3, .dev = 2, .bus_id = 0x18000}); }

TEST(TopoXml, BusIdText) {
  EXPECT_EQ(busIdText(0x18000), "0000:18:00.0");
  EXPECT_EQ(busIdText((std::int64_t{0xfffe} << 20) | (3 << 12)), "fffe:03:00.0");
  EXPECT_EQ(busIdText(0x12345678), "0123:45:67.8");
  EXPECT_EQ(busIdText(0x1ab0), "0000:01:ab.0");
  EXPECT_EQ(busIdText(0xf), "0000:00:00.f");
  EXPECT_EQ(busIdText(std::int64_t{0x10000} << 20), "10000:00:00.0");
}

TEST(TopoXml, BuiltSlotIsTrimmedLikeNccl) {
  const Slot s = built();
  ASSERT_EQ(s.size(), kSlotBytes);
  EXPECT_EQ(getI32(s, 0), 7);  // system pci cpu gpu nvlink nic net
  EXPECT_EQ(getI32(s, 4), 256);
  EXPECT_EQ(str(s, base(kSystem)), "system");
  EXPECT_EQ(str(s, base(kPci)), "pci");
  EXPECT_EQ(str(s, base(kCpu)), "cpu");
  EXPECT_EQ(str(s, base(kGpu)), "gpu");
  // keep was set before rank and gdr and then unset: they shifted down, a stale gdr remains.
  ASSERT_EQ(getI32(s, base(kGpu) + kNAttrsOffset), 4);
  EXPECT_EQ(str(s, attrAt(kGpu, 0)), "dev");
  EXPECT_EQ(str(s, attrAt(kGpu, 1)), "sm");
  EXPECT_EQ(str(s, attrAt(kGpu, 2)), "rank");
  EXPECT_EQ(str(s, attrAt(kGpu, 3)), "gdr");
  EXPECT_EQ(str(s, attrAt(kGpu, 4)), "gdr");
  EXPECT_EQ(str(s, valueAt(s, kPci, "busid")), "0000:18:00.0");
}

TEST(TopoXml, FindGpuOnBuiltSlot) {
  const GpuInSlot g = findGpu(built(), 3);
  EXPECT_EQ(g.node, kGpu);
  EXPECT_EQ(g.pci_node, kPci);
  EXPECT_EQ(g.busid, "0000:18:00.0");
  EXPECT_EQ(g.dev, 2);
  EXPECT_EQ(g.rank, 3);
  EXPECT_EQ(g.nvlinks, 18);
  EXPECT_EQ(g.nvlinks_to_nvswitch, 18);
  EXPECT_EQ(g.nvlinks_to_gpu, 0);

  const GpuInSlot bare = findGpu(buildSlot({.rank = 0, .dev = 5, .nvswitch = false}), 0);
  EXPECT_EQ(bare.dev, 5);
  EXPECT_EQ(bare.nvlinks, 0);
  EXPECT_EQ(bare.nvlinks_to_nvswitch, 0);

  const GpuInSlot peer = findGpu(buildSlot({.rank = 1, .gpu_peer_link = true}), 1);
  EXPECT_EQ(peer.nvlinks, 22);
  EXPECT_EQ(peer.nvlinks_to_nvswitch, 18);
  EXPECT_EQ(peer.nvlinks_to_gpu, 4);
}

TEST(TopoXml, CloneChangesOnlyRankDevBusid) {
  const Slot s = built();
  const std::int64_t v_bus = (std::int64_t{0xfffe} << 20) | (2 << 12);
  const Slot c = cloneSlotFor(s, 3, 12, 1, v_bus);
  ASSERT_EQ(c.size(), s.size());
  const std::size_t fields[] = {valueAt(s, kGpu, "rank"), valueAt(s, kGpu, "dev"),
                                valueAt(s, kPci, "busid")};
  int changed[3] = {0, 0, 0};
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == c[i]) continue;
    int f = 0;
    while (f < 3 && !(i >= fields[f] && i < fields[f] + kStrBytes)) ++f;
    ASSERT_LT(f, 3) << "byte " << i << " changed outside rank/dev/busid";
    ++changed[f];
  }
  EXPECT_EQ(changed[0], 2);  // "3" -> "12"
  EXPECT_EQ(changed[1], 1);  // "2" -> "1"
  EXPECT_EQ(changed[2], 6);  // "0000:18:00.0" -> "fffe:02:00.0"
  EXPECT_EQ(str(c, fields[2]), "fffe:02:00.0");

  const GpuInSlot g = findGpu(c, 12);
  EXPECT_EQ(g.node, kGpu);
  EXPECT_EQ(g.busid, "fffe:02:00.0");
  EXPECT_EQ(g.dev, 1);
  EXPECT_EQ(g.rank, 12);
  EXPECT_EQ(g.nvlinks_to_nvswitch, 18);  // the NVSwitch link travels with the clone
  expectRefused([&] { (void)findGpu(c, 3); }, "no gpu node with rank 3");
}

TEST(TopoXml, CloneOfClone) {
  const Slot c1 = cloneSlotFor(built(), 3, 100, 7, 0x123456789);
  const Slot c2 = cloneSlotFor(c1, 100, 4, 0, 0x18000);
  const GpuInSlot g = findGpu(c2, 4);
  EXPECT_EQ(g.busid, "0000:18:00.0");
  EXPECT_EQ(g.dev, 0);
  // The source again but for rank "3" -> "4" and dev "2" -> "0", NUL padding included.
  Slot expect = built();
  std::memcpy(&expect[valueAt(expect, kGpu, "rank")], "4", 1);
  std::memcpy(&expect[valueAt(expect, kGpu, "dev")], "0", 1);
  EXPECT_TRUE(c2 == expect);
}

TEST(TopoXml, RefusesBadHeader) {
  Slot s = built();
  expectFindRefused(Slot(s.begin(), s.end() - 1), "2562055 bytes, expected 2562056");
  expectFindRefused(Slot{}, "0 bytes");
  putI32(s, 0, 0);
  expectFindRefused(s, "maxIndex 0");
  putI32(s, 0, 257);
  expectFindRefused(s, "maxIndex 257");
  putI32(s, 0, 7);
  putI32(s, 4, 255);
  expectFindRefused(s, "maxNodes 255");
}

TEST(TopoXml, RefusesBadCounts) {
  Slot s = built();
  putI32(s, base(kGpu) + kNAttrsOffset, 18);
  expectFindRefused(s, "node 3 (gpu) has nAttrs 18");
  s = built();
  putI32(s, base(kCpu) + kNSubsOffset, 129);
  expectFindRefused(s, "node 2 (cpu) has nSubs 129");
}

TEST(TopoXml, RefusesBadOffsets) {
  Slot s = built();
  putU64(s, base(kSystem) + kSubsOffset, 2 * kNodeBytes + 8);
  expectFindRefused(s, "node 0 (system) sub 0 has offset 20024");
  s = built();
  putU64(s, base(kSystem) + kSubsOffset, 7 * kNodeBytes);  // maxIndex is 7
  expectFindRefused(s, "sub 0 has offset 70056, not a node below 7");
  s = built();
  putU64(s, base(kGpu) + kParentOffset, kPci * kNodeBytes);  // no +1
  expectFindRefused(s, "node 3 (gpu) has parent 10008");
  s = built();
  putU64(s, base(kGpu) + kParentOffset, kCpu * kNodeBytes + 1);
  expectFindRefused(s, "node 1 lists node 3 as a sub, whose parent is node 2");
  s = built();  // the system lists its cpu twice
  putI32(s, base(kSystem) + kNSubsOffset, 2);
  putU64(s, base(kSystem) + kSubsOffset + 8, kCpu * kNodeBytes);
  expectFindRefused(s, "node 2 is listed twice");
}

TEST(TopoXml, RefusesUnterminatedStringsAndBadRoot) {
  Slot s = built();
  std::memset(&s[base(kCpu)], 'a', kStrBytes);
  expectFindRefused(s, "node 2 name has no NUL");
  s = built();
  std::memset(&s[valueAt(s, kPci, "link_width")], '1', kStrBytes);
  expectFindRefused(s, "node 1 value of attribute 7 has no NUL");
  s = built();
  std::memcpy(&s[base(kSystem)], "sys", 4);
  expectFindRefused(s, "node 0 is 'sys'");
}

TEST(TopoXml, RefusesMissingGpu) {
  const Slot s = built();
  expectRefused([&] { (void)findGpu(s, 4); }, "no gpu node with rank 4");
  Slot t = built();  // unlinked like ncclTopoTrimXml does: the cpu keeps only its nic
  putU64(t, base(kCpu) + kSubsOffset, 5 * kNodeBytes);
  putI32(t, base(kCpu) + kNSubsOffset, 1);
  expectFindRefused(t, "no gpu node with rank 3");
  t = built();
  std::memcpy(&t[valueAt(t, kGpu, "rank")], "3x", 3);
  expectFindRefused(t, "gpu node 3 has rank '3x', not an integer");
}

TEST(TopoXml, RefusesGpuWithoutPciParent) {
  Slot s = built();
  std::memcpy(&s[base(kPci)], "pcx", 4);
  expectFindRefused(s, "gpu node 3 (rank 3) has no pci parent with a busid");
  s = built();
  std::memcpy(&s[attrAt(kPci, 0)], "busiX", 6);
  expectFindRefused(s, "gpu node 3 (rank 3) has no pci parent with a busid");
}

TEST(TopoXml, RefusesGpuClassNvlinkAndBadArguments) {
  const Slot s = buildSlot({.rank = 3, .gpu_peer_link = true});
  expectRefused([&] { (void)cloneSlotFor(s, 3, 9, 1, 0x19000); },
                "rank 3's GPU has an NVLink to GPU 0000:19:00.0");
  Slot t = built();
  std::memcpy(&t[valueAt(t, kNvlink, "tclass")], "0x030200", 9);
  expectRefused([&] { (void)cloneSlotFor(t, 3, 9, 1, 0x19000); }, "NVLink to GPU fffffff:ffff:ff");
  expectRefused([&] { (void)cloneSlotFor(built(), 3, -1, 1, 0x19000); }, "must be >= 0");
  expectRefused([&] { (void)cloneSlotFor(built(), 3, 9, 1, -1); }, "must be >= 0");
}

}  // namespace
}  // namespace crystal::host::topo_xml
