// How the real ranks of a PyTorch job are started: per-rank processes and environment for
// `python ...` and `torchrun ...` (bypassed), the command as given otherwise.
#include <gtest/gtest.h>

#include <map>

#include "crystal/base/error.h"
#include "crystal/store/launch.h"

namespace crystal::store {
namespace {

LaunchInputs inputs(std::vector<int> real, std::map<std::string, std::string> env = {}) {
  LaunchInputs in;
  in.world_size = 64;
  in.real_ranks = std::move(real);
  in.gpus_per_node = 8;
  in.local_gpus = 1;
  in.master_addr = "127.0.0.1";
  in.master_port = 29555;
  in.getenv = [env](const std::string& k) -> std::optional<std::string> {
    const auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  return in;
}

std::map<std::string, std::string> asMap(const Env& env) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : env) m[k] = v;  // later entries win, as setenv does
  return m;
}

TEST(StoreLaunch, PythonRunsOncePerRealRank) {
  const LaunchPlan p = planLaunch({"python3", "train.py", "--steps", "3"}, inputs({0, 32}));
  EXPECT_EQ(p.kind, LaunchKind::Python);
  ASSERT_EQ(p.processes.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& proc = p.processes[i];
    EXPECT_EQ(proc.argv, (std::vector<std::string>{"python3", "train.py", "--steps", "3"}));
    auto env = asMap(proc.env);
    EXPECT_EQ(env["RANK"], i == 0 ? "0" : "32");
    EXPECT_EQ(env["LOCAL_RANK"], "0");  // one GPU here: both ranks share it
    EXPECT_EQ(env["WORLD_SIZE"], "64");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], "29555");
    EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "True");
    EXPECT_EQ(env["TORCH_NCCL_RANKS_PER_ROOT"], "64");
    EXPECT_EQ(env["TORCH_NCCL_ENABLE_MONITORING"], "0");
    EXPECT_EQ(env["TORCH_DIST_INIT_BARRIER"], "0");
    EXPECT_EQ(env.count("LOCAL_WORLD_SIZE"), 0u);  // a plain launch sets only what env:// reads
  }
}

TEST(StoreLaunch, LocalRankCyclesOverTheLocalGpus) {
  auto in = inputs({0, 8, 16});
  in.local_gpus = 2;
  const LaunchPlan p = planLaunch({"/usr/bin/python3.12", "t.py"}, in);
  ASSERT_EQ(p.processes.size(), 3u);
  EXPECT_EQ(asMap(p.processes[0].env)["LOCAL_RANK"], "0");
  EXPECT_EQ(asMap(p.processes[1].env)["LOCAL_RANK"], "1");
  EXPECT_EQ(asMap(p.processes[2].env)["LOCAL_RANK"], "0");
}

TEST(StoreLaunch, UserChoicesOfPyTorchSwitchesAreKept) {
  const LaunchPlan p = planLaunch(
      {"python", "t.py"},
      inputs({0}, {{"TORCH_NCCL_RANKS_PER_ROOT", "16"}, {"TORCH_NCCL_ENABLE_MONITORING", "1"}}));
  auto env = asMap(p.processes.at(0).env);
  EXPECT_EQ(env["TORCH_NCCL_RANKS_PER_ROOT"], "16");
  EXPECT_EQ(env.count("TORCH_NCCL_ENABLE_MONITORING"), 0u);  // inherited, not overridden
  EXPECT_THROW(
      (void)planLaunch({"python", "t.py"}, inputs({0}, {{"TORCH_NCCL_RANKS_PER_ROOT", "lots"}})),
      InputError);
}

TEST(StoreLaunch, TorchrunIsBypassedWithTheWorkerEnvironment) {
  const LaunchPlan p = planLaunch({"torchrun", "--nnodes=8", "--nproc_per_node", "8", "--rdzv-id",
                                   "job7", "--standalone", "train.py", "--lr", "1e-4"},
                                  inputs({0, 32}));
  EXPECT_EQ(p.kind, LaunchKind::Torchrun);
  ASSERT_EQ(p.processes.size(), 2u);
  const auto& argv = p.processes[1].argv;
  ASSERT_EQ(argv.size(), 5u);
  EXPECT_EQ(argv[1], "-u");
  EXPECT_EQ((std::vector<std::string>(argv.begin() + 2, argv.end())),
            (std::vector<std::string>{"train.py", "--lr", "1e-4"}));
  auto env = asMap(p.processes[1].env);
  EXPECT_EQ(env["RANK"], "32");
  EXPECT_EQ(env["GROUP_RANK"], "4");
  EXPECT_EQ(env["ROLE_RANK"], "32");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "8");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "8");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job7");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "True");
  ASSERT_FALSE(p.notes.empty());
  EXPECT_NE(p.notes.back().find("torchrun bypassed"), std::string::npos);
}

TEST(StoreLaunch, TorchrunModuleAndNoPython) {
  LaunchPlan p =
      planLaunch({"python3", "-m", "torch.distributed.run", "-m", "pkg.train", "x"}, inputs({0}));
  EXPECT_EQ(p.kind, LaunchKind::Torchrun);
  EXPECT_EQ(p.processes.at(0).argv,
            (std::vector<std::string>{"python3", "-u", "-m", "pkg.train", "x"}));
  p = planLaunch({"torchrun", "--no-python", "./bin", "a"}, inputs({0}));
  EXPECT_EQ(p.processes.at(0).argv, (std::vector<std::string>{"./bin", "a"}));
}

TEST(StoreLaunch, TorchrunWorldMismatchIsNoted) {
  const LaunchPlan p =
      planLaunch({"torchrun", "--nnodes", "1", "--nproc-per-node", "8", "t.py"}, inputs({0}));
  ASSERT_GE(p.notes.size(), 2u);
  EXPECT_NE(p.notes[0].find("1 x 8 = 8 workers; the emulated job has WORLD_SIZE 64"),
            std::string::npos)
      << p.notes[0];
}

TEST(StoreLaunch, BadTorchrunCommandsNameTheProblem) {
  try {
    (void)planLaunch({"torchrun", "--nprocs", "8", "t.py"}, inputs({0}));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'--nprocs' is not one of PyTorch 2.11's torchrun"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)planLaunch({"torchrun", "--nnodes", "2"}, inputs({0})), InputError);
  EXPECT_THROW((void)planLaunch({"torchrun", "--nnodes"}, inputs({0})), InputError);
  EXPECT_THROW((void)planLaunch({"torchrun", "--standalone=1", "t.py"}, inputs({0})), InputError);
  EXPECT_THROW((void)planLaunch({}, inputs({0})), InputError);
  EXPECT_THROW((void)planLaunch({"python", "t.py"}, inputs({})), InputError);
}

TEST(StoreLaunch, OtherCommandsRunOnceWithTheStoreVariables) {
  LaunchPlan p = planLaunch({"./my_launcher.sh", "a"}, inputs({0, 32}));
  EXPECT_EQ(p.kind, LaunchKind::Other);
  ASSERT_EQ(p.processes.size(), 1u);
  auto env = asMap(p.processes[0].env);
  EXPECT_EQ(env.count("RANK"), 0u);  // the launcher gives each of its ranks one
  EXPECT_EQ(env["MASTER_PORT"], "29555");
  p = planLaunch({"./one_rank"}, inputs({7}));
  EXPECT_EQ(asMap(p.processes.at(0).env)["RANK"], "7");
}

TEST(StoreLaunch, LocalGpuCountFromCudaVisibleDevices) {
  EXPECT_EQ(localGpuCount([](const std::string&) { return std::optional<std::string>("0,3,5"); }),
            3);
  EXPECT_GE(localGpuCount([](const std::string&) { return std::nullopt; }), 1);
}

}  // namespace
}  // namespace crystal::store
