// NCCL_GRAPH_FILE of a real rank's node (node_graph.h): the ring chain rotated only for a real
// rank at an end of its node in a comm over several nodes, the tree in rank order, the devs
// as NCCL's own dump writes them (hexadecimal), bad nodes refused.
#include "node_graph.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "crystal/base/error.h"

namespace crystal::host {
namespace {

using Order = std::vector<int>;

TEST(NodeGraph, RingOrderPutsARealRankAtAnEndBetweenTwoMembers) {
  EXPECT_EQ(nodeRingOrder(8, 0, true), (Order{2, 3, 4, 5, 6, 7, 0, 1}));
  EXPECT_EQ(nodeRingOrder(8, 7, true), (Order{1, 2, 3, 4, 5, 6, 7, 0}));
  EXPECT_EQ(nodeRingOrder(8, 5, true), (Order{0, 1, 2, 3, 4, 5, 6, 7})) << "already inside";
  EXPECT_EQ(nodeRingOrder(8, 0, false), (Order{0, 1, 2, 3, 4, 5, 6, 7}))
      << "one node: the ring closes on it";
  EXPECT_EQ(nodeRingOrder(3, 0, true), (Order{2, 0, 1}));
  EXPECT_EQ(nodeRingOrder(3, 2, true), (Order{1, 2, 0}));
  EXPECT_EQ(nodeRingOrder(2, 0, true), (Order{0, 1})) << "no place between two members";
}

// The gpu devs of each channel of graph `id`, in document order.
std::vector<Order> channelDevs(const std::string& xml, int id) {
  std::vector<Order> out;
  const auto start = xml.find("<graph id=\"" + std::to_string(id) + "\"");
  const auto end = xml.find("</graph>", start);
  const std::string g = xml.substr(start, end - start);
  const std::regex channel("<channel>([\\s\\S]*?)</channel>"), gpu("<gpu dev=\"(0x[0-9a-f]+|0)\"/>");
  for (auto c = std::sregex_iterator(g.begin(), g.end(), channel); c != std::sregex_iterator();
       ++c) {
    const std::string body = (*c)[1];
    Order devs;
    for (auto d = std::sregex_iterator(body.begin(), body.end(), gpu); d != std::sregex_iterator();
         ++d)
      devs.push_back(std::stoi((*d)[1], nullptr, 16));
    out.push_back(devs);
  }
  return out;
}

TEST(NodeGraph, RingRotatedTreeInRankOrderDevsInHex) {
  NodeGraph g;
  g.devs = {0, 1, 2, 3, 4, 5, 6, 7};
  g.devs[0] = 3;  // R (local 0) has NVML index 3; the member of slot 3 took R's slot
  g.devs[3] = 0;
  g.real_local = 0;
  const std::string xml = nodeGraphXml(g);
  EXPECT_NE(xml.find("<graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"2\""),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<graph id=\"1\" pattern=\"3\" crossnic=\"0\" nchannels=\"2\""),
            std::string::npos);
  EXPECT_NE(xml.find("<net dev=\"0\"/>"), std::string::npos);
  const auto ring = channelDevs(xml, 0), tree = channelDevs(xml, 1);
  ASSERT_EQ(ring.size(), 2u);
  ASSERT_EQ(tree.size(), 2u);
  for (const auto& c : ring) EXPECT_EQ(c, (Order{2, 0, 4, 5, 6, 7, 3, 1}));
  for (const auto& c : tree) EXPECT_EQ(c, (Order{3, 1, 2, 0, 4, 5, 6, 7}));
  EXPECT_NE(xml.find("<gpu dev=\"0x7\"/>"), std::string::npos) << "hexadecimal, as NCCL reads";
}

TEST(NodeGraph, BadNodesAreRefusedAndTheEmptyGraphHasNone) {
  NodeGraph g;
  g.devs = {0, 1, 1};
  EXPECT_THROW((void)nodeGraphXml(g), InputError);  // repeated
  g.devs = {0, 32};
  EXPECT_THROW((void)nodeGraphXml(g), InputError);  // outside NCCL's pair table
  g.devs = {0};
  EXPECT_THROW((void)nodeGraphXml(g), InputError);  // a node of one
  g.devs = {0, 1};
  g.real_local = 2;
  EXPECT_THROW((void)nodeGraphXml(g), InputError);
  EXPECT_EQ(emptyGraphXml().find("<graph "), std::string::npos);
  EXPECT_NE(emptyGraphXml().find("<graphs version=\"1\">"), std::string::npos);
}

}  // namespace
}  // namespace crystal::host
