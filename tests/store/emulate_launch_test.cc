// `crystal emulate` with PyTorch-style launches, as processes: each real rank is started
// with its RANK/WORLD_SIZE/MASTER_* and reaches the store; a virtual rank 0 hands out an id
// the host minted; an unanswerable key fails the rank within --store-timeout; torchrun is
// bypassed. The ranks are python3-fake-rank (fake_torch_rank.cc), so no PyTorch is needed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "tests/common/scratch_cwd.h"
#include "wire.h"

namespace {

struct ShellRun {
  int status = -1;
  std::string out;
};

ShellRun shell(const std::string& cmd) {
  ShellRun r;
  FILE* p = ::popen((crystal::test::inScratchDir() + cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) r.out += buf.data();
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string emulate(const std::string& config, const std::string& opts = "") {
  return std::string(CRYSTAL_EXE) + " emulate " + TEST_DIR + "/" + config + " --plugin " +
         INTERPOSER_LIB + " " + opts + " -- ";
}

// "rank=R ..." lines of the fake ranks, by rank.
std::map<int, std::string> rankLines(const std::string& out) {
  std::map<int, std::string> lines;
  const std::regex re(R"(^rank=(\d+) (.*)$)");
  std::size_t pos = 0;
  while (pos < out.size()) {
    const auto nl = out.find('\n', pos);
    const std::string line = out.substr(pos, nl - pos);
    std::smatch m;
    if (std::regex_match(line, m, re)) lines[std::stoi(m[1])] = m[2];
    pos = nl == std::string::npos ? out.size() : nl + 1;
  }
  return lines;
}

std::string field(const std::string& line, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(name + "=(\\S*)"))) return "";
  return m[1];
}

TEST(StoreEmulate, TwoRealRanksOfSixtyFourShareRankZerosId) {
  const ShellRun r = shell(emulate("emulate64_ranks_0_32.yaml", "--gpus 2") + FAKE_RANK);
  ASSERT_EQ(r.status, 0) << r.out;
  auto lines = rankLines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (const auto& [rank, line] : lines) {
    EXPECT_EQ(field(line, "world"), "64");
    EXPECT_EQ(field(line, "agent_store"), "True");
    EXPECT_EQ(field(line, "len"), "128");
    // Both got the bytes rank 0 wrote ("rank0-id" + zeros).
    EXPECT_EQ(field(line, "id"), "72616e6b302d69640000000000000000");
  }
  EXPECT_EQ(field(lines[0], "local_rank"), "0");
  EXPECT_EQ(field(lines[32], "local_rank"), "1");
  // 62 virtual check-ins + 2 real ones: the last ADD sees the whole world.
  EXPECT_EQ(std::max(std::stoi(field(lines[0], "init")), std::stoi(field(lines[32], "init"))), 64);
}

TEST(StoreEmulate, VirtualRankZeroHandsOutAHostMintedId) {
  const ShellRun r = shell(emulate("emulate64_ranks_5.yaml") + FAKE_RANK);
  ASSERT_EQ(r.status, 0) << r.out;
  auto lines = rankLines(r.out);
  ASSERT_EQ(lines.count(5), 1u) << r.out;
  const std::string id = field(lines[5], "id");
  // ncclUniqueId = {u64 magic; sockaddr_in of the root}: AF_INET, host's port, 127.0.0.1.
  ASSERT_EQ(id.size(), 32u);
  EXPECT_EQ(id.substr(16, 4), "0200");
  EXPECT_NE(id.substr(20, 4), "0000");
  EXPECT_EQ(id.substr(24, 8), "7f000001");
  EXPECT_EQ(field(lines[5], "init"), "64");
}

TEST(StoreEmulate, AKeyNobodyWritesFailsTheRankInTime) {
  const auto t0 = std::chrono::steady_clock::now();
  const ShellRun r = shell("FAKE_RANK_WAIT=/nobody/writes " +
                           emulate("emulate64_ranks_5.yaml", "--store-timeout 1") + FAKE_RANK);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("rank=5 closed"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(store: rank 5 \(pid \d+\): waited 1 s for '/nobody/writes')")))
      << r.out;
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST(StoreEmulate, TorchrunIsBypassed) {
  // A torchrun whose interpreter (its "#!" line) is the fake rank.
  const std::string dir = std::string(BIN_DIR) + "/fake_torchrun";
  ::mkdir(dir.c_str(), 0755);
  const std::string torchrun = dir + "/torchrun";
  {
    std::ofstream f(torchrun);
    f << "#!" << FAKE_RANK << "\n";
  }
  ::chmod(torchrun.c_str(), 0755);
  const ShellRun r = shell(emulate("emulate64_ranks_0_32.yaml") + torchrun +
                           " --nnodes 8 --nproc-per-node 8 train.py --lr 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(rankLines(r.out).size(), 2u) << r.out;
  EXPECT_NE(r.out.find("torchrun bypassed"), std::string::npos) << r.out;
  const ShellRun bad =
      shell(emulate("emulate64_ranks_0_32.yaml") + torchrun + " --bogus 1 train.py");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("'--bogus'"), std::string::npos) << bad.out;
}

TEST(StoreEmulate, AFailingRankStopsTheOthers) {
  // Rank 32 waits for a key nobody writes (30 s store timeout); rank 0 exits with 5 at once
  // (a shell wrapper named like a Python interpreter): rank 32 must be stopped, not waited for.
  const std::string dir = std::string(BIN_DIR) + "/fake_fail";
  ::mkdir(dir.c_str(), 0755);
  const std::string py = dir + "/python3-fail0";
  {
    std::ofstream f(py);
    f << "#!/bin/sh\nif [ \"$RANK\" = 0 ]; then exit 5; fi\nexec env FAKE_RANK_WAIT=/never "
      << FAKE_RANK << "\n";
  }
  ::chmod(py.c_str(), 0755);
  const auto t0 = std::chrono::steady_clock::now();
  const ShellRun r = shell(emulate("emulate64_ranks_0_32.yaml") + py);
  EXPECT_EQ(r.status, 5) << r.out;
  EXPECT_NE(r.out.find("stopping rank 32 after rank 0 failed"), std::string::npos) << r.out;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// `crystal host` (the SLURM path) runs the store too and exports where it is.
TEST(StoreHost, ExportsTheStoreAndServesIt) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const std::string config = std::string(TEST_DIR) + "/emulate64_ranks_5.yaml";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::execl(CRYSTAL_EXE, CRYSTAL_EXE, "host", config.c_str(), "--plugin", INTERPOSER_LIB, nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  std::map<std::string, std::string> exports;
  std::string line;
  char c = 0;
  while (exports.count("TORCH_NCCL_RANKS_PER_ROOT") == 0 && ::read(out[0], &c, 1) == 1) {
    if (c != '\n') {
      line += c;
      continue;
    }
    std::smatch m;
    if (std::regex_match(line, m, std::regex(R"(export (\w+)='(.*)')"))) exports[m[1]] = m[2];
    line.clear();
  }
  EXPECT_EQ(exports["MASTER_ADDR"], "127.0.0.1");
  EXPECT_EQ(exports["WORLD_SIZE"], "64");
  EXPECT_EQ(exports["TORCHELASTIC_USE_AGENT_STORE"], "True");
  EXPECT_EQ(exports["TORCH_NCCL_RANKS_PER_ROOT"], "64");
  EXPECT_EQ(exports.count("RANK"), 0u);  // each srun task sets its own
  ASSERT_FALSE(exports["MASTER_PORT"].empty());
  // The exported store answers like PyTorch's: 63 virtual check-ins + this one.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(std::stoi(exports["MASTER_PORT"])));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  namespace cl = crystal::store::client;
  const std::string req = cl::validate() + cl::ping(77) + cl::add("init/", 1);
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  char reply[12];
  std::size_t got = 0;
  while (got < sizeof reply) {
    const ssize_t n = ::recv(fd, reply + got, sizeof reply - got, 0);
    ASSERT_GT(n, 0);
    got += static_cast<std::size_t>(n);
  }
  std::int64_t init = 0;
  std::memcpy(&init, reply + 4, 8);
  EXPECT_EQ(init, 64);
  ::close(fd);
  ::kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ::close(out[0]);
}

}  // namespace
