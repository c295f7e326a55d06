// `crystal simulate --sweep` and `crystal nccl-tests --from` as a user runs them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/common/scratch_cwd.h"

namespace {

struct CliRun {
  int code = -1;
  std::string out;
};

CliRun run(const std::string& args) {
  CliRun r;
  const std::string cmd =
      crystal::test::inScratchDir() + std::string(CRYSTAL_EXE) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kConfig = std::string(SOURCE_DIR) + "/config/examples/nccl-tests-8192.yaml";
const std::string kCorpus = std::string(SOURCE_DIR) + "/tests/fuzz/corpus/sweep_nccl_tests_table";

nlohmann::json readJson(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

TEST(SweepCli, SimulateSweepTableAndJson) {
  const std::string json = ::testing::TempDir() + "sweep_cli.json";
  const CliRun r = run("simulate " + kConfig + " --sweep --op allreduce,sendrecv -b 8 -e 1G -f 4 " +
                       "--ranks 1024 --json " + json);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("# allreduce (all_reduce_perf) on 1024 ranks"), std::string::npos);
  EXPECT_NE(r.out.find("# time: per operation of 20 back to back (-n)\n"), std::string::npos);
  EXPECT_NE(r.out.find("# sendrecv (sendrecv_perf) on 1024 ranks"), std::string::npos);
  const nlohmann::json j = readJson(json);
  EXPECT_EQ(j["nranks"], 1024);
  ASSERT_EQ(j["results"].size(), 2u * 14);
  EXPECT_EQ(j["results"][13]["size"], 1ULL << 29);
}

TEST(SweepCli, SimulateSweepBadOptionsExit2) {
  EXPECT_EQ(run("simulate " + kConfig + " --sweep --op gather").code, 2);
  EXPECT_EQ(run("simulate " + kConfig + " --sweep -b 2G -e 1G").code, 2);
  EXPECT_EQ(run("simulate " + kConfig + " --sweep --ranks 12").code, 2);
  EXPECT_EQ(run("simulate " + kConfig + " --sweep --ranks 16384").code, 2);
  EXPECT_EQ(run("simulate " + kConfig + " --sweep -d fp32").code, 2);
  EXPECT_EQ(run("simulate " + kConfig + " --sweep --ranks 16 --rank 16").code, 2);
  EXPECT_EQ(run("simulate " + kConfig + " --sweep -n 0").code, 2);
  EXPECT_EQ(run("simulate " + kConfig + " --sweep -n x").code, 2);
}

// -n: broadcast rows per operation of that many back to back (NCCL-tests' -n, default 20);
// the chain's fill is paid once, so the loop's operation is the shorter.
TEST(SweepCli, BroadcastIsOneOfItersBackToBack) {
  const auto time = [](const std::string& extra) {
    const std::string json = ::testing::TempDir() + "sweep_cli_n.json";
    const CliRun r = run("simulate " + kConfig + " --sweep --op broadcast -b 64M -e 64M " +
                         "--ranks 64 --proto Simple --json " + json + extra);
    EXPECT_EQ(r.code, 0) << r.out;
    return readJson(json)["results"][0]["time"].get<double>();
  };
  const double alone = time(" -n 1"), loop = time(""), twenty = time(" --iters 20");
  EXPECT_EQ(readJson(::testing::TempDir() + "sweep_cli_n.json")["iters"], 20);
  EXPECT_DOUBLE_EQ(loop, twenty);
  EXPECT_LT(loop, 0.5 * alone);  // the last of 64 ranks: the fill is most of one alone
  EXPECT_GT(loop, time(" -n 1000"));
}

TEST(SweepCli, NcclTestsFromLogRestatesForTarget) {
  const std::string json = ::testing::TempDir() + "nccl_tests_cli.json";
  const CliRun r = run("nccl-tests " + kConfig + " --from " + kCorpus + "/all_reduce_1rank.txt" +
                       " --json " + json);
  ASSERT_EQ(r.code, 0) << r.out;
  // 1 GiB in 7351.3 us: algbw 146.06, busbw x 2 * 8191/8192 = 292.09 on the target.
  EXPECT_NE(r.out.find("  1073741824     268435456     float     sum      -1  7351.30  146.06  "
                       "292.09"),
            std::string::npos)
      << r.out;
  const nlohmann::json j = readJson(json);
  EXPECT_EQ(j["program"], "all_reduce_perf");
  EXPECT_EQ(j["program_ranks"], 1);
  ASSERT_EQ(j["results"].size(), 8u);  // 4 sizes, out-of-place and in-place
  EXPECT_EQ(j["results"][4]["in_place"], true);
}

#ifdef INTERPOSER_LIB
// `crystal emulate` itself recognises an NCCL-tests binary (here a stand-in that prints a
// saved table) and adds the target's table and --json.
TEST(SweepCli, EmulateOfAnNcclTestsBinaryAddsTheTargetTable) {
  const std::string dir = ::testing::TempDir() + "sweep_cli_bin";
  const std::string bin = dir + "/all_gather_perf";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  {
    std::ofstream f(bin);
    f << "#!/bin/sh\nsed s/all_reduce_perf/all_gather_perf/ " << kCorpus
      << "/all_reduce_1rank.txt\n";
  }
  ASSERT_EQ(std::system(("chmod +x " + bin).c_str()), 0);
  const std::string json = ::testing::TempDir() + "emulate_nccl_tests.json";
  const CliRun r = run("emulate " + kConfig + " --plugin " + INTERPOSER_LIB + " --json " + json +
                       " -- " + bin + " -b 8 -e 1G");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("# Collective test concluded: all_gather_perf"), std::string::npos);
  // 1 MiB all-gather of 1 rank = 262144 floats per rank -> 32 per rank on 8192.
  EXPECT_NE(r.out.find("     1048576            32     float"), std::string::npos) << r.out;
  const nlohmann::json j = readJson(json);
  EXPECT_EQ(j["program"], "all_gather_perf");
  EXPECT_EQ(j["results"][2]["count"], 32);
}
#endif

TEST(SweepCli, NcclTestsBadLogNamesTheLine) {
  const CliRun r = run("nccl-tests " + kConfig + " --from " + kCorpus + "/bad_row.txt");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("bad_row.txt:2:"), std::string::npos) << r.out;
  EXPECT_EQ(run("nccl-tests " + kConfig + " --from /nonexistent.log").code, 2);
}

}  // namespace
