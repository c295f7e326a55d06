// Graph files: binary and JSON round trips; truncated or corrupted files name the offset.
#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <fstream>

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "crystal/base/error.h"
#include "graph/file_format.h"
#include "graph/template_graph.h"
#include "test_configs.h"

namespace crystal::graph {
namespace {

using ::testing::HasSubstr;

std::string errorOf(std::string_view data) {
  try {
    (void)decodeBinary(data, "g.bin");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

void expectSameStreams(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.worldSize(), b.worldSize());
  ASSERT_EQ(a.totalOps(), b.totalOps());
  std::vector<Op> x, y;
  for (int r = 0; r < a.worldSize(); ++r) {
    a.materialize(r, x);
    b.materialize(r, y);
    ASSERT_EQ(x, y) << "rank " << r;
  }
}

class FileTest : public ::testing::Test {
 protected:
  std::string path(const char* name) {
    auto p = std::filesystem::temp_directory_path() /
             (std::string("crystal_graph_test_") + std::to_string(::getpid()) + name);
    files_.push_back(p);
    return p.string();
  }
  void TearDown() override {
    for (const auto& p : files_) std::filesystem::remove(p);
  }
  std::vector<std::filesystem::path> files_;
};

TEST_F(FileTest, BinaryRoundTrip) {
  for (const Config& c : {testing::smallDense(), testing::smallMoe()}) {
    auto g = buildGraph(c);
    const std::string p = path(".bin");
    saveGraphBinary(*g, p);
    auto back = loadGraphFile(p);
    expectSameStreams(*g, *back);
    const auto& a = static_cast<const TemplateGraph&>(*g).templates();
    const auto& b = static_cast<const TemplateGraph&>(*back).templates();
    EXPECT_EQ(a, b);
    Config cb = back->config();
    cb.source = c.source;
    EXPECT_EQ(cb, c);
  }
}

TEST_F(FileTest, JsonRoundTrip) {
  for (const Config& c : {testing::smallDense(), testing::smallMoe()}) {
    auto g = buildGraph(c);
    const std::string p = path(".json");
    saveGraphJson(*g, p);
    auto back = loadGraphFile(p);
    expectSameStreams(*g, *back);
  }
}

TEST_F(FileTest, ConfigReferringToGraphFile) {
  Config c = testing::smallDense();
  auto g = buildGraph(c);
  const std::string p = path(".bin");
  saveGraphBinary(*g, p);
  Config ref = c;
  ref.workload.kind = "graph";
  ref.workload.graph_file = p;
  expectSameStreams(*g, *buildGraph(ref));
  ref.job.layout = LayoutConfig{2, 1, 1, 2, 4, "tp-cp-ep-dp-pp"};
  ref.workload.layers = 4;
  EXPECT_THROW((void)buildGraph(ref), InputError);
}

TEST(FileFormat, TruncatedNamesOffset) {
  auto g = buildGraph(testing::smallDense());
  const auto& tg = static_cast<const TemplateGraph&>(*g);
  const std::string data = encodeBinary(tg.config(), tg.templates());
  EXPECT_THAT(errorOf(data.substr(0, 20)), HasSubstr("truncated at byte offset 0: header needs 48"));
  EXPECT_THAT(errorOf(data.substr(0, data.size() - 1)),
              HasSubstr("truncated or extended: header (byte offset 16)"));
  EXPECT_THAT(errorOf(data + "x"), HasSubstr("truncated or extended"));
  EXPECT_EQ(errorOf(""), "g.bin: truncated at byte offset 0: header needs 48 bytes, 0 left");
}

TEST(FileFormat, CorruptedNamesOffset) {
  auto g = buildGraph(testing::smallDense());
  const auto& tg = static_cast<const TemplateGraph&>(*g);
  std::string data = encodeBinary(tg.config(), tg.templates());
  std::string bad = data;
  bad[0] = 'X';
  EXPECT_THAT(errorOf(bad), HasSubstr("corrupted at byte offset 0: not a crystal graph file"));
  bad = data;
  bad[data.size() - 3] ^= 0x10;
  EXPECT_THAT(errorOf(bad), HasSubstr("corrupted at byte offset 24: checksum"));
  bad = data;
  bad[8] = 9;
  EXPECT_THAT(errorOf(bad), HasSubstr("corrupted at byte offset 8: version 9"));
  // A bad op kind behind a correct checksum: the op's own offset is named.
  Templates t = tg.templates();
  t.classes[1][0].kind = static_cast<OpKind>(77);
  const std::string enc = encodeBinary(tg.config(), t);
  const std::string e = errorOf(enc);
  EXPECT_THAT(e, HasSubstr("class 1 op 0: kind/coll/dtype/red value out of range"));
  const std::size_t class1 = enc.size() - 8 - 40 * tg.templates().classes[1].size();
  EXPECT_THAT(e, HasSubstr(fmt::format("corrupted at byte offset {}", class1 + 8)));
}

TEST(FileFormat, BadJson) {
  EXPECT_THAT([] {
    try {
      (void)decodeJson("{\"format\": \"crystal-graph\", ", "g.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  }(), HasSubstr("g.json: malformed JSON at byte offset"));
  EXPECT_THROW((void)decodeJson("{\"format\": \"other\"}", "g.json"), InputError);
  EXPECT_THROW((void)decodeJson("[1, 2]", "g.json"), InputError);
  // A number JSON cannot hold is nlohmann's out_of_range, not its parse_error (found by
  // graph_pyrun_fuzz in the pyrun reader): an input error too, not a crash.
  EXPECT_THROW((void)decodeJson("{\"format\": 1e999}", "g.json"), InputError);
}

}  // namespace
}  // namespace crystal::graph
