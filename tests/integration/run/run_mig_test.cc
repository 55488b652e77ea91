// `tessera run --mig` as a user runs it: the real CLI on the simulated
// A100-80GB, MIG mode turned on the way the error message says
// (`tessera sim mig`, then `tessera sim reset --gpu 0`), a driver-API probe
// (tests/integration/mig/mig_probe) as the job, `tessera smi` to see the GPU.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "base/testing.h"
#include "testing/process.h"
#include "testing/sim_gpu.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSim = "1xA100-80GB";

class RunMigTest : public ::testing::Test {
 protected:
  // Runs `tessera ARGS...` on the test's simulated machine to its end.
  testing::Outcome Tessera(std::vector<std::string> args) {
    args.insert(args.begin(), TESSERA_EXE);
    return testing::RunToEnd({.argv = std::move(args), .env = sim_.Environment()}, dir_);
  }
  // `tessera run --sim ... --ledger-dir ... ARGS...` started, output to files named after `tag`.
  pid_t StartRun(const std::vector<std::string>& args, const std::string& tag) {
    std::vector<std::string> argv = {TESSERA_EXE, "run", "--sim", kSim, "--ledger-dir", ledger_};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::SpawnOnSimGpu(
        sim_,
        {.argv = argv, .stdout_path = dir_ + "/" + tag + ".out", .stderr_path = dir_ + "/" + tag + ".err"});
  }
  testing::Outcome Run(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"run", "--sim", kSim, "--ledger-dir", ledger_};
    argv.insert(argv.end(), args.begin(), args.end());
    return Tessera(argv);
  }
  std::string Smi() { return Tessera({"smi", "--sim", kSim, "--ledger-dir", ledger_}).out; }
  // How many MIG devices `tessera smi` shows on GPU 0 (-1: not in MIG mode).
  int MigDevices() {
    std::smatch m;
    const std::string smi = Smi();
    if (!std::regex_search(smi, m, std::regex("MIG mode on: (\\d+) MIG device"))) return -1;
    return std::stoi(m[1]);
  }
  // MIG mode on, as a user would turn it on for the A100 (a reset applies it).
  void TurnMigOn() {
    ASSERT_EQ(MigDevices(), -1) << Smi();  // the simulated GPU exists from here on
    auto on = Tessera({"sim", "mig", "--gpu", "0", "on"});
    ASSERT_EQ(on.exit_code, 0) << on.err;
    EXPECT_NE(on.out.find("pending until the GPU is reset: tessera sim reset --gpu 0"), std::string::npos)
        << on.out;
    auto reset = Tessera({"sim", "reset", "--gpu", "0"});
    ASSERT_EQ(reset.exit_code, 0) << reset.err;
    ASSERT_EQ(MigDevices(), 0) << Smi();
  }
  std::string Read(const std::string& name) { return tmp_.Read(name); }

  ::tessera::testing::TempDir tmp_{"tessera-run-mig"};
  const std::string dir_ = tmp_.path();
  const std::string ledger_ = dir_ + "/ledger";
  const testing::SimGpu sim_{.gpus = kSim, .state_dir = dir_ + "/sim"};
};

TEST_F(RunMigTest, TheJobSeesOneDeviceOfTheProfileAndTheInstanceIsGoneAfter) {
  TurnMigOn();
  // The job: the probe (allocating 1000 MiB, then 12000 MiB more than the
  // instance has), then `tessera smi` from inside the job.
  const std::string job = std::string(TESSERA_MIG_PROBE) + " 1000; " + TESSERA_MIG_PROBE +
                          " 12000; echo \"CVD=$CUDA_VISIBLE_DEVICES NVD=$NVIDIA_VISIBLE_DEVICES\"; " +
                          TESSERA_EXE + " smi --sim " + kSim + " --ledger-dir " + ledger_ + "; exit 5";
  auto run = Run({"--mig", "1g.10gb", "--", "/bin/sh", "-c", job});
  EXPECT_EQ(run.exit_code, 5) << run.err;  // the command's exit status passes through
  EXPECT_NE(run.out.find("1|NVIDIA A100-SXM4-80GB MIG 1g.10gb|9728|14\nALLOC 1000 OK\n"), std::string::npos)
      << run.out << run.err;
  EXPECT_NE(run.out.find("ALLOC 12000 FAILED"), std::string::npos) << run.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.out, m, std::regex("CVD=(MIG-[0-9a-f-]+) NVD=(MIG-[0-9a-f-]+)")))
      << run.out;
  EXPECT_EQ(m[1], m[2]);
  const std::string mig_uuid = m[1];
  // smi from inside the job: the device under its GPU, held by the job.
  std::smatch row;
  ASSERT_TRUE(std::regex_search(run.out, row,
                                std::regex("1g\\.10gb +slice (\\d)\\+1 +" + mig_uuid +
                                           " +\\d+ / 9728 MiB +14 SMs +(job-[0-9a-f]+) sh")))
      << run.out;
  EXPECT_NE(run.err.find(row[2].str() + " in MIG 1g.10gb " + mig_uuid), std::string::npos) << run.err;
  EXPECT_EQ(MigDevices(), 0) << Smi();
  EXPECT_NE(Tessera({"ps", "--ledger-dir", ledger_}).out.find("no running slices"), std::string::npos);
}

TEST_F(RunMigTest, AKilledRunnersInstanceIsRemovedByTheNextRun) {
  TurnMigOn();
  const std::string ready = dir_ + "/ready";
  const std::string job =
      std::string(TESSERA_MIG_PROBE) + " 500 > " + dir_ + "/probe.out; touch " + ready + "; exec sleep 60";
  pid_t runner = StartRun({"--mig", "3g.40gb", "--", "/bin/sh", "-c", job}, "killed");
  ASSERT_TRUE(testing::WaitFor([&] { return fs::exists(ready); })) << Read("killed.err");
  EXPECT_EQ(Read("probe.out"), "1|NVIDIA A100-SXM4-80GB MIG 3g.40gb|40192|42\nALLOC 500 OK\n");
  ASSERT_EQ(MigDevices(), 1);
  testing::KillAndWait(runner, SIGKILL);  // the job dies with it; the instance stays
  EXPECT_EQ(MigDevices(), 1);
  EXPECT_NE(Smi().find("(runner gone: the next run removes it)"), std::string::npos) << Smi();

  auto next = Run({"--mig", "1g.10gb", "--", "true"});
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_NE(next.err.find("removed the 3g.40gb instance"), std::string::npos) << next.err;
  EXPECT_EQ(MigDevices(), 0) << Smi();
}

TEST_F(RunMigTest, SigtermReachesTheJobAndTheInstanceIsRemoved) {
  TurnMigOn();
  const std::string ready = dir_ + "/ready";
  pid_t runner = StartRun({"--mig", "2g.20gb", "--", "/bin/sh", "-c",
                           "trap 'exit 3' TERM; touch " + ready + "; while :; do sleep 0.05; done"},
                          "term");
  ASSERT_TRUE(testing::WaitFor([&] { return fs::exists(ready); })) << Read("term.err");
  ASSERT_EQ(MigDevices(), 1);
  ::kill(runner, SIGTERM);
  const int status = testing::WaitStatus(runner);
  ASSERT_TRUE(WIFEXITED(status)) << Read("term.err");
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_EQ(MigDevices(), 0) << Smi();
  // The job does not inherit the signals `tessera run` blocks while it makes the instance.
  auto mask = Run({"--mig", "2g.20gb", "-q", "--", "/bin/grep", "SigBlk", "/proc/self/status"});
  ASSERT_EQ(mask.exit_code, 0) << mask.err;
  const unsigned long long blocked = std::stoull(mask.out.substr(mask.out.find(':') + 1), nullptr, 16);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) EXPECT_EQ(blocked & (1ull << (sig - 1)), 0u) << mask.out;
}

TEST_F(RunMigTest, BadRequestsAreRefusedWithTheCauseAndChangeNothing) {
  // MIG mode off: how to turn it on.
  auto off = Run({"--mig", "1g.10gb", "--", "true"});
  EXPECT_EQ(off.exit_code, 2);
  EXPECT_NE(off.err.find("no GPU with the profile 1g.10gb is in MIG mode"), std::string::npos) << off.err;
  EXPECT_NE(off.err.find("`tessera sim mig --gpu 0 on`, then reset the GPU (`tessera sim reset --gpu 0`"),
            std::string::npos)
      << off.err;
  TurnMigOn();
  auto unknown = Run({"--mig", "1g.5gb", "--", "true"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("unknown MIG profile '1g.5gb'"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find("its profiles: 1g.10gb, 1g.10gb+me, 1g.20gb"), std::string::npos) << unknown.err;
  auto sized = Run({"--mig", "1g.10gb", "--gpumem", "4000", "--", "true"});
  EXPECT_EQ(sized.exit_code, 2);
  EXPECT_NE(sized.err.find("--mig cannot be combined with --gpumem"), std::string::npos) << sized.err;
  auto gpu_alone = Run({"--gpu", "0", "--", "true"});
  EXPECT_EQ(gpu_alone.exit_code, 2);
  EXPECT_NE(gpu_alone.err.find("--gpu chooses the GPU of a --mig instance"), std::string::npos)
      << gpu_alone.err;
  auto no_gpu = Run({"--mig", "1g.10gb", "--gpu", "3", "--", "true"});
  EXPECT_EQ(no_gpu.exit_code, 2);
  EXPECT_NE(no_gpu.err.find("--gpu 3: this machine has no such GPU (it has 1)"), std::string::npos)
      << no_gpu.err;
  // A whole-GPU instance, then no room for another.
  const std::string ready = dir_ + "/ready";
  pid_t whole =
      StartRun({"--mig", "7g.80gb", "--", "/bin/sh", "-c", "touch " + ready + "; exec sleep 60"}, "whole");
  ASSERT_TRUE(testing::WaitFor([&] { return fs::exists(ready); })) << Read("whole.err");
  auto full = Run({"--mig", "1g.10gb", "--", "true"});
  EXPECT_EQ(full.exit_code, 2);
  EXPECT_NE(full.err.find("no GPU can take a 1g.10gb instance"), std::string::npos) << full.err;
  EXPECT_NE(full.err.find("no free placement"), std::string::npos) << full.err;
  // A slice is refused on a GPU in MIG mode.
  auto slice = Run({"--gpumem", "1000", "--", "true"});
  EXPECT_EQ(slice.exit_code, 2);
  EXPECT_NE(slice.err.find("in MIG mode: it offers MIG instances, not slices"), std::string::npos)
      << slice.err;
  EXPECT_EQ(MigDevices(), 1);
  testing::KillAndWait(whole, SIGTERM);
  EXPECT_EQ(MigDevices(), 0) << Smi();
}

TEST_F(RunMigTest, SimMigTurnsHopperOnAtOnceAndRefusesBadInput) {
  // Another simulated machine, in its own state: an H100 and an L4.
  const testing::SimGpu other{.gpus = "1xH100-80GB,1xL4", .state_dir = dir_ + "/other"};
  auto on_other = [&](std::vector<std::string> args) {
    args.insert(args.begin(), TESSERA_EXE);
    return testing::RunToEnd({.argv = std::move(args), .env = other.Environment()}, dir_);
  };
  auto missing = on_other({"sim", "mig", "--gpu", "0", "on"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("tessera sim mig: "), std::string::npos) << missing.err;
  ASSERT_EQ(on_other({"smi", "--sim", other.gpus, "--ledger-dir", ledger_}).exit_code,
            0);  // creates the state

  auto mode = on_other({"sim", "mig", "--gpu", "0", "maybe"});
  EXPECT_EQ(mode.exit_code, 2);
  EXPECT_NE(mode.err.find("the mode is 'on' or 'off', not 'maybe'"), std::string::npos) << mode.err;
  auto no_gpu = on_other({"sim", "mig", "--gpu", "2", "on"});
  EXPECT_EQ(no_gpu.exit_code, 1);
  EXPECT_NE(no_gpu.err.find("no GPU 2 (the state has 2)"), std::string::npos) << no_gpu.err;
  auto no_mig = on_other({"sim", "mig", "--gpu", "1", "on"});
  EXPECT_EQ(no_mig.exit_code, 1);
  EXPECT_NE(no_mig.err.find("GPU 1 (NVIDIA L4) has no MIG"), std::string::npos) << no_mig.err;

  auto on = on_other({"sim", "mig", "--gpu", "0", "on"});
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_EQ(on.out, "GPU 0: MIG mode on\n");
  auto run =
      on_other({"run", "--sim", other.gpus, "--ledger-dir", ledger_, "--mig", "1g.10gb", "--", "true"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("in MIG 1g.10gb MIG-"), std::string::npos) << run.err;
  // The L4 is not MIG-capable: --gpu 1 says so.
  auto l4 = on_other(
      {"run", "--sim", other.gpus, "--ledger-dir", ledger_, "--mig", "1g.10gb", "--gpu", "1", "--", "true"});
  EXPECT_EQ(l4.exit_code, 2);
  EXPECT_NE(l4.err.find("GPU 1 has no MIG:"), std::string::npos) << l4.err;
  EXPECT_NE(l4.err.find("#1 NVIDIA L4 ("), std::string::npos) << l4.err;
}

}  // namespace
}  // namespace tessera
