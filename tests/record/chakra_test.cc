// Chakra ET export/import: graph -> ET -> graph is exact; bad files name file and node.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "crystal/base/error.h"
#include "crystal/graph/import.h"
#include "graph/validate.h"
#include "tests/graph/test_configs.h"
#include "tests/record/graph_compare.h"

namespace crystal::graph {
namespace {

using testing::Compare;
using testing::firstDifference;
using ::testing::HasSubstr;

std::unique_ptr<Graph> roundTrip(const Config& cfg, const Graph& g) {
  std::vector<RecordedRank> recs;
  for (std::int32_t c = 0; c < g.numClasses(); ++c) {
    const std::int32_t r = g.representative(c);
    recs.push_back(parseChakraTrace(writeChakraTrace(g, r), fmt::format("job.{}.et", r)));
  }
  return sliceRecordings(cfg, recs);
}

TEST(Chakra, DenseExampleRoundTripsExactly) {
  const Config cfg = loadConfig(CRYSTAL_SOURCE_DIR "/config/examples/dense-8gpu.yaml");
  const auto g = buildGraph(cfg);
  const auto back = roundTrip(cfg, *g);
  EXPECT_EQ(firstDifference(*g, *back, Compare::Exact), "");
  EXPECT_NO_THROW((void)validateGraph(*back));
}

TEST(Chakra, MoeRoundTripsExactly) {
  const Config cfg = graph::testing::smallMoe();
  const auto g = buildGraph(cfg);
  EXPECT_EQ(firstDifference(*g, *roundTrip(cfg, *g), Compare::Exact), "");
}

TEST(Chakra, RecordingComesBackEqual) {
  const auto g = buildGraph(graph::testing::smallDense());
  const RecordedRank want = recordingOf(*g, 9);
  const RecordedRank got = parseChakraTrace(writeChakraTrace(*g, 9), "x.et");
  EXPECT_EQ(got.rank, 9);
  ASSERT_EQ(got.ops.size(), want.ops.size());
  for (std::size_t i = 0; i < want.ops.size(); ++i) {
    Op a = want.ops[i], b = got.ops[i];
    EXPECT_EQ(want.strings[a.name], got.strings[b.name]) << i;
    a.name = b.name = 0;
    EXPECT_EQ(a, b) << "op " << i;
  }
}

std::string errorOf(const std::string& bytes, const std::string& file = "bad.3.et") {
  try {
    (void)parseChakraTrace(bytes, file);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Chakra, BadFilesNameFileAndNode) {
  const auto g = buildGraph(graph::testing::smallDense());
  const std::string et = writeChakraTrace(*g, 0);
  EXPECT_THAT(errorOf(""), HasSubstr("bad.3.et: empty file"));
  EXPECT_THAT(errorOf(et.substr(0, et.size() - 3)), HasSubstr("runs past the end of the file"));
  EXPECT_THAT(errorOf(std::string("\xff\xff\xff\xff\xff\xff", 6)),
              HasSubstr("bad or truncated length"));
  // A node whose bytes are not a Node message: length 2, then a field with wire type 7.
  std::string junk = et;
  junk += std::string("\x02\x0f\x01", 3);
  EXPECT_THAT(errorOf(junk), HasSubstr("not a valid ChakraProtoMsg.Node message"));
}

TEST(Chakra, NodeErrorsNameTheNode) {
  // Hand-built file: metadata without members, one collective naming an unknown group.
  auto varint = [](std::string& s, std::uint32_t v) {
    while (v >= 0x80) {
      s += static_cast<char>(v | 0x80);
      v >>= 7;
    }
    s += static_cast<char>(v);
  };
  std::string meta;  // GlobalMetadata{version: "0.0.4"}
  meta += '\x0a';
  varint(meta, 5);
  meta += "0.0.4";
  std::string node;  // Node{id: 7, name: "ar", type: COMM_COLL_NODE}
  node += '\x08';
  node += '\x07';
  node += '\x12';
  node += '\x02';
  node += "ar";
  node += '\x18';
  node += '\x07';
  std::string file;
  varint(file, static_cast<std::uint32_t>(meta.size()));
  file += meta;
  varint(file, static_cast<std::uint32_t>(node.size()));
  file += node;
  EXPECT_THAT(errorOf(file),
              HasSubstr("bad.3.et: node 0 (id 7, 'ar'): communication node without a 'pg_name'"));
  EXPECT_THAT(errorOf(file, "norank.et"), HasSubstr("no 'rank' metadata and no NAME.<rank>.et"));
}

}  // namespace
}  // namespace crystal::graph
