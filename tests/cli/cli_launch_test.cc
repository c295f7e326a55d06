// `crystal emulate` and `crystal host` as processes: the environment the real ranks get,
// exit statuses, bad input (exit 2), and a live host that mints NCCL-shaped unique ids.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <map>
#include <regex>
#include <string>

#include "crystal/control/socket_io.h"
#include "plugin/interpose/control_client.h"
#include "tests/common/scratch_cwd.h"

namespace {

const std::string kConfig = std::string(TEST_DIR) + "/emulate64.yaml";

struct ShellRun {
  int status = -1;
  std::string out;
};

ShellRun shell(const std::string& cmd) {
  ShellRun r;
  FILE* p = ::popen((crystal::test::inScratchDir() + cmd + " 2>/dev/null").c_str(), "r");
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) r.out += buf.data();
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::map<std::string, std::string> parseEnv(const std::string& out) {
  std::map<std::string, std::string> env;
  std::size_t pos = 0;
  while (pos < out.size()) {
    const auto nl = out.find('\n', pos);
    const std::string line = out.substr(pos, nl - pos);
    if (const auto eq = line.find('='); eq != std::string::npos)
      env[line.substr(0, eq)] = line.substr(eq + 1);
    pos = nl == std::string::npos ? out.size() : nl + 1;
  }
  return env;
}

TEST(CrystalEmulate, GivesTheRealRanksTheirEnvironment) {
  const ShellRun r =
      shell(std::string(CRYSTAL_EXE) + " emulate " + kConfig + " --plugin " + INTERPOSER_LIB +
            " -- " + PRINT_ENV_EXE +
            " NCCL_NET_PLUGIN NCCL_NET NCCL_IB_DISABLE NCCL_HOSTID NCCL_RAS_ENABLE"
            " NCCL_MNNVL_ENABLE NCCL_NVLS_ENABLE NCCL_PXN_DISABLE NCCL_RUNTIME_CONNECT"
            " NCCL_LOCAL_REGISTER NCCL_GRAPH_REGISTER NCCL_PROTO NCCL_SOCKET_IFNAME"
            " NCCL_UID_STAGGER_THRESHOLD CRYSTAL_CONFIG CRYSTAL_HOST CRYSTAL_TIMEOUT"
            " LD_PRELOAD LD_LIBRARY_PATH");
  ASSERT_EQ(r.status, 0) << r.out;
  auto env = parseEnv(r.out);
  EXPECT_EQ(env["NCCL_NET_PLUGIN"], "crystal");
  EXPECT_EQ(env["NCCL_NET"], "crystal");
  EXPECT_EQ(env["NCCL_IB_DISABLE"], "1");
  EXPECT_EQ(env["NCCL_RAS_ENABLE"], "0");
  EXPECT_EQ(env["NCCL_MNNVL_ENABLE"], "0");
  EXPECT_EQ(env["NCCL_NVLS_ENABLE"], "0");
  EXPECT_EQ(env["NCCL_PXN_DISABLE"], "1");
  EXPECT_EQ(env["NCCL_RUNTIME_CONNECT"], "0");
  EXPECT_EQ(env["NCCL_LOCAL_REGISTER"], "0");
  EXPECT_EQ(env["NCCL_GRAPH_REGISTER"], "0");
  EXPECT_EQ(env.count("NCCL_PROTO"), 0u) << "crystal lets NCCL choose protocols";
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "lo");
  EXPECT_EQ(env["NCCL_UID_STAGGER_THRESHOLD"], "100000");
  EXPECT_EQ(env["CRYSTAL_CONFIG"], kConfig);
  EXPECT_EQ(env["CRYSTAL_TIMEOUT"], "30");
  EXPECT_TRUE(std::regex_match(env["CRYSTAL_HOST"], std::regex(R"(127\.0\.0\.1:\d+)")))
      << env["CRYSTAL_HOST"];
  EXPECT_EQ(env["LD_PRELOAD"].substr(0, std::string(INTERPOSER_LIB).size()), INTERPOSER_LIB);
  // Set by the preloaded interposer in the child itself: <prefix>-<pid of print_env>.
  EXPECT_TRUE(std::regex_match(env["NCCL_HOSTID"], std::regex(R"(crystal-[0-9a-f]+-\d+)")))
      << env["NCCL_HOSTID"];
}

// Its own recording feeds the report (the program's calls only); one the caller asked for
// (`crystal record -- crystal emulate ...`) keeps every event type.
TEST(CrystalEmulate, RecordsTheProgramsCallsForItsReport) {
  const std::string cmd = std::string(CRYSTAL_EXE) + " emulate " + kConfig + " --plugin " +
                          INTERPOSER_LIB + " -- " + PRINT_ENV_EXE +
                          " CRYSTAL_RECORD CRYSTAL_RECORD_EVENTS";
  const ShellRun own = shell(cmd);
  ASSERT_EQ(own.status, 0) << own.out;
  auto env = parseEnv(own.out);
  EXPECT_FALSE(env["CRYSTAL_RECORD"].empty()) << own.out;
  EXPECT_EQ(env["CRYSTAL_RECORD_EVENTS"], "api");
  const ShellRun outer = shell("CRYSTAL_RECORD=/tmp/crystal-outer-record " + cmd);
  ASSERT_EQ(outer.status, 0) << outer.out;
  env = parseEnv(outer.out);
  EXPECT_EQ(env["CRYSTAL_RECORD"], "/tmp/crystal-outer-record");
  EXPECT_EQ(env.count("CRYSTAL_RECORD_EVENTS"), 0u) << outer.out;
  EXPECT_NE(outer.out.find("CRYSTAL_RECORD_EVENTS unset"), std::string::npos) << outer.out;
}

TEST(CrystalEmulate, ExitsWithTheCommandsStatus) {
  EXPECT_EQ(shell("PRINT_ENV_EXIT=3 " + std::string(CRYSTAL_EXE) + " emulate " + kConfig +
                  " --plugin " + INTERPOSER_LIB + " -- " + PRINT_ENV_EXE)
                .status,
            3);
  EXPECT_EQ(shell(std::string(CRYSTAL_EXE) + " emulate " + kConfig + " --plugin " + INTERPOSER_LIB +
                  " -- /nonexistent/program")
                .status,
            127);
}

TEST(CrystalEmulate, BadInputExitsWithTwo) {
  const std::string base = std::string(CRYSTAL_EXE) + " emulate ";
  EXPECT_EQ(shell(base + kConfig + " " + PRINT_ENV_EXE).status, 2);  // no --
  EXPECT_EQ(shell(base + "/nonexistent.yaml --plugin " + INTERPOSER_LIB + " -- true").status, 2);
  EXPECT_EQ(shell(base + kConfig + " --plugin /nonexistent.so -- true").status, 2);
  EXPECT_EQ(
      shell(base + kConfig + " --split block:0 --plugin " + INTERPOSER_LIB + " -- true").status, 2);
}

TEST(CrystalHost, ServesUniqueIdsThatPointAtItselfUntilKilled) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::execl(CRYSTAL_EXE, CRYSTAL_EXE, "host", kConfig.c_str(), "--plugin", INTERPOSER_LIB, nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  std::string first;
  char c = 0;
  while (::read(out[0], &c, 1) == 1 && c != '\n') first += c;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first, m, std::regex(R"(listening on (127\.0\.0\.1:\d+))")))
      << first;
  crystal::interpose::ControlClient client(m[1].str(), 5.0,
                                           crystal::control::Hello{1, 22809, "test"});
  const auto id = client.getUniqueId();
  // ncclUniqueId: {uint64 magic; sockaddr_in root} + zeros.
  EXPECT_EQ(id[8] | (id[9] << 8), AF_INET);
  EXPECT_NE(id[10] | id[11], 0);  // the root port
  EXPECT_EQ(id[12], 127);
  EXPECT_EQ(id[15], 1);
  for (std::size_t i = 40; i < id.size(); ++i) EXPECT_EQ(id[i], 0) << i;
  EXPECT_NE(client.getUniqueId(), id);  // fresh magic each time
  ::kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  ::close(out[0]);
}

}  // namespace
