// `crystal simulate` end to end: exit codes, and the files it writes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code = -1;
  std::string out;
};

CliRun crystal(const std::string& args) {
  const std::string cmd = std::string(CRYSTAL_BIN) + " " + args + " 2>&1";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) r.out += buf;
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

fs::path tempDir() {
  fs::path d = fs::temp_directory_path() / ("crystal_sim_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

const std::string kSmall = std::string(CRYSTAL_SOURCE_DIR) + "/config/examples/dense-8gpu.yaml";

TEST(SimulateCli, PrintsOneRowPerClassAndWritesJsonAndTrace) {
  const fs::path d = tempDir();
  const CliRun r = crystal("simulate " + kSmall + " --json " + (d / "s.json").string() +
                           " --trace " + (d / "t.json").string() + " --ranks 0,5");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("iter (ms)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("AllReduce"), std::string::npos) << r.out;

  std::ifstream sf(d / "s.json");
  const auto s = nlohmann::json::parse(sf);
  EXPECT_EQ(s["world"], 8);
  ASSERT_FALSE(s["classes"].empty());
  std::int64_t ranks = 0;
  for (const auto& c : s["classes"]) {
    ranks += c["ranks"].get<std::int64_t>();
    EXPECT_GT(c["iteration_us"].get<double>(), 0.0);
    EXPECT_LE(c["compute_us"].get<double>(), c["iteration_us"].get<double>());
  }
  EXPECT_EQ(ranks, 8);  // the classes cover the world

  std::ifstream tf(d / "t.json");
  const auto t = nlohmann::json::parse(tf);
  bool saw0 = false, saw5 = false;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    saw0 |= e["pid"] == 0;
    saw5 |= e["pid"] == 5;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
  }
  EXPECT_TRUE(saw0);
  EXPECT_TRUE(saw5);
  fs::remove_all(d);
}

// --iterations N replays N iterations; the table shows their mean, --json each one.
TEST(SimulateCli, IterationsAreReplayedAndListed) {
  const fs::path d = tempDir();
  const CliRun r =
      crystal("simulate " + kSmall + " --iterations 3 --json " + (d / "s.json").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 iterations"), std::string::npos) << r.out;
  std::ifstream sf(d / "s.json");
  const auto s = nlohmann::json::parse(sf);
  for (const auto& c : s["classes"]) {
    ASSERT_EQ(c["iterations"].size(), 3u);
    // Steady state: the last two iterations of a class take the same time.
    EXPECT_NEAR(c["iterations"][1]["time_us"].get<double>(),
                c["iterations"][2]["time_us"].get<double>(), 1e-3);
  }
  fs::remove_all(d);
}

TEST(SimulateCli, BadInputExitsWithTwo) {
  EXPECT_EQ(crystal("simulate").code, 2);
  EXPECT_EQ(crystal("simulate /nonexistent/crystal.yaml").code, 2);
  EXPECT_EQ(crystal("simulate " + kSmall + " --bogus").code, 2);
  EXPECT_EQ(crystal("simulate " + kSmall + " --iterations 0").code, 2);
  EXPECT_EQ(crystal("simulate " + kSmall + " --ranks 0").code, 2);  // --ranks needs --trace
  EXPECT_EQ(crystal("simulate " + kSmall + " --trace /tmp/x.json --ranks 99").code, 2);

  const fs::path d = tempDir();
  {
    std::ofstream f(d / "bad.yaml");
    f << "cluster: {nodes: 1}\njob:\n  layout: {tp: 3, pp: 2, dp: 2}\n"
         "workload: {kind: dense, layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 16}\n";
  }
  const CliRun r = crystal("simulate " + (d / "bad.yaml").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("bad.yaml"), std::string::npos) << r.out;  // names the file
  fs::remove_all(d);
}

}  // namespace
