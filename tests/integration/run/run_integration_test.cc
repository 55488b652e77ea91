// `tessera run` as a user runs it: the real CLI binary on the simulated GPU,
// with libvgpu.so enforcing the slice.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/testing.h"
#include "host/region_reader.h"
#include "runner/ledger.h"
#include "testing/process.h"
#include "testing/sim_gpu.h"

namespace tessera::runner {
namespace {

namespace fs = std::filesystem;

using ::tessera::testing::ReadFileOrEmpty;
using ::tessera::testing::WaitFor;

// `text` with every run of whitespace made one space: help texts are wrapped
// for the terminal, and a test should not depend on where.
std::string Squashed(const std::string& text) {
  std::istringstream words(text);
  std::string out, w;
  while (words >> w) out += (out.empty() ? "" : " ") + w;
  return out;
}

class RunIntegration : public ::testing::Test {
 protected:
  // Starts `tessera run --sim <spec> --ledger-dir <ledger> ARGS...` with
  // stdout/stderr to files named after `tag`.
  pid_t Start(const std::vector<std::string>& args, const std::string& tag,
              const std::string& sim = "1xA100-40GB") {
    std::vector<std::string> argv = {TESSERA_EXE, "run", "--sim", sim, "--ledger-dir", ledger_};
    argv.insert(argv.end(), args.begin(), args.end());
    return Exec(argv, tag);
  }
  // Runs `argv` (no shell) in the test's simulated machine (TESSERA_SIM_STATE,
  // TESSERA_SIM_GPUS = 1xA100-40GB for a `tessera` without --sim) with `env`
  // added to this process's environment, stdout/stderr to files named after
  // `tag`; `in_child` runs before exec.
  pid_t Exec(std::vector<std::string> argv, const std::string& tag, const ::tessera::testing::Env& env = {},
             const std::function<void()>& in_child = nullptr) {
    return ::tessera::testing::SpawnOnSimGpu(sim_, {.argv = std::move(argv),
                                                    .env = env,
                                                    .stdout_path = dir_ + "/" + tag + ".out",
                                                    .stderr_path = dir_ + "/" + tag + ".err",
                                                    .in_child = in_child});
  }
  int Wait(pid_t pid) { return ::tessera::testing::WaitStatus(pid); }
  int Run(const std::vector<std::string>& args, const std::string& tag) { return Wait(Start(args, tag)); }
  std::string Err(const std::string& tag) { return tmp_.Read(tag + ".err"); }
  std::string Out(const std::string& tag) { return tmp_.Read(tag + ".out"); }

  size_t LiveSlices() {
    SliceLedger ledger(ledger_);
    auto entries = ledger.List();
    return entries.ok() ? entries->size() : 0;
  }
  ::tessera::testing::TempDir tmp_{"tessera-run-it"};
  const std::string dir_ = tmp_.path();
  const std::string ledger_ = dir_ + "/ledger";
  // A `tessera` without --sim sees one A100-40GB here.
  const ::tessera::testing::SimGpu sim_{.gpus = "1xA100-40GB", .state_dir = dir_ + "/sim"};
};

TEST_F(RunIntegration, PassesTheExitCodeThrough) {
  int status = Run({"--gpumem", "100", "--", "sh", "-c", "exit 7"}, "exit");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7) << Err("exit");
  EXPECT_EQ(LiveSlices(), 0u);
}

TEST_F(RunIntegration, PassesDeathBySignalThrough) {
  int status = Run({"--gpumem", "100", "--", "sh", "-c", "kill -TERM $$"}, "sig");
  ASSERT_TRUE(WIFSIGNALED(status)) << Err("sig");
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(LiveSlices(), 0u);
  int killed = Run({"--gpumem", "100", "--", "sh", "-c", "kill -KILL $$"}, "kill");
  ASSERT_TRUE(WIFSIGNALED(killed)) << Err("kill");
  EXPECT_EQ(WTERMSIG(killed), SIGKILL);
}

TEST_F(RunIntegration, AShellSeesTheJobsSignalAs128PlusN) {
  // What `tessera run --help` promises: the caller sees the job's signal, so
  // its shell reports 128 + N, exactly as for the bare command.
  const std::string run =
      std::string(TESSERA_EXE) + " run --sim 1xA100-40GB --ledger-dir " + ledger_ + " --gpumem 100 -- ";
  int status =
      Wait(Exec({"/bin/sh", "-c",
                 run + "sh -c 'kill -TERM $$'; echo \"wrapped $?\"; sh -c 'kill -TERM $$'; echo \"bare $?\""},
                "shell"));
  ASSERT_TRUE(WIFEXITED(status)) << Err("shell");
  EXPECT_NE(Out("shell").find("wrapped 143\nbare 143\n"), std::string::npos) << Out("shell") << Err("shell");
}

TEST_F(RunIntegration, ACoreDumpingSignalIsPassedOnWithoutACoreOfItsOwn) {
  // The job aborts (without dumping core itself); `tessera run`, allowed to
  // dump core and working in dir_, must end by SIGABRT yet leave no core file
  // of its own there.
  pid_t pid = Exec({TESSERA_EXE, "run", "--sim", "1xA100-40GB", "--ledger-dir", ledger_, "--gpumem", "100",
                    "--", "sh", "-c", "ulimit -c 0; kill -ABRT $$"},
                   "abrt", {}, [this] {
                     struct rlimit core {};
                     getrlimit(RLIMIT_CORE, &core);
                     core.rlim_cur = core.rlim_max;
                     setrlimit(RLIMIT_CORE, &core);
                     if (chdir(dir_.c_str()) != 0) _exit(125);
                   });
  int status = Wait(pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << Err("abrt");
  EXPECT_EQ(WTERMSIG(status), SIGABRT);
  EXPECT_FALSE(WCOREDUMP(status));
  for (const auto& f : fs::directory_iterator(dir_)) {
    EXPECT_EQ(f.path().filename().string().rfind("core", 0), std::string::npos) << f.path();
  }
}

TEST_F(RunIntegration, HelpDescribesTheExitStatusRunGives) {
  int status = Wait(Exec({TESSERA_EXE, "run", "--help"}, "help"));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Err("help");
  const std::string help = Squashed(Out("help"));
  EXPECT_NE(help.find("killed by signal N, `tessera run` ends by the same signal N"), std::string::npos)
      << help;
  EXPECT_NE(help.find("a shell reports 128+N and Python's returncode is -N"), std::string::npos) << help;
}

TEST_F(RunIntegration, QuietSilencesTheSimulatedGpuNoteButNotErrors) {
  // Without --sim, on a machine without an NVIDIA driver, `tessera run` says in
  // one line that it uses the simulated GPU; -q silences that and the job line.
  const std::vector<std::string> run = {TESSERA_EXE, "run", "--ledger-dir", ledger_, "--gpumem", "100"};
  auto with = [&](std::vector<std::string> flags, std::vector<std::string> tail) {
    std::vector<std::string> argv = run;
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--");
    argv.insert(argv.end(), tail.begin(), tail.end());
    return argv;
  };
  int loud = Wait(Exec(with({}, {"true"}), "loud"));
  ASSERT_TRUE(WIFEXITED(loud) && WEXITSTATUS(loud) == 0) << Err("loud");
  if (Err("loud").find("no NVIDIA driver found") == std::string::npos) {
    GTEST_SKIP() << "this machine has an NVIDIA driver: " << Err("loud");
  }
  EXPECT_NE(Err("loud").find("using the simulated GPU"), std::string::npos) << Err("loud");
  for (const char* q : {"-q", "--quiet"}) {
    int quiet = Wait(Exec(with({q}, {"true"}), "quiet"));
    ASSERT_TRUE(WIFEXITED(quiet) && WEXITSTATUS(quiet) == 0) << Err("quiet");
    EXPECT_EQ(Err("quiet"), "") << q;
  }
  // Errors still reach stderr: a refusal, and a command that is not found.
  int refused =
      Wait(Exec({TESSERA_EXE, "run", "-q", "--ledger-dir", ledger_, "--gpumem", "50000", "--", "true"},
                "quiet-refused"));
  ASSERT_TRUE(WIFEXITED(refused));
  EXPECT_EQ(WEXITSTATUS(refused), 2);
  EXPECT_NE(Err("quiet-refused").find("does not fit"), std::string::npos) << Err("quiet-refused");
  EXPECT_EQ(Err("quiet-refused").find("no NVIDIA driver found"), std::string::npos) << Err("quiet-refused");
  int missing = Wait(Exec(with({"-q"}, {"/nonexistent/tessera-no-such-command"}), "quiet-missing"));
  ASSERT_TRUE(WIFEXITED(missing));
  EXPECT_EQ(WEXITSTATUS(missing), 127);
  EXPECT_NE(Err("quiet-missing").find("command not found"), std::string::npos) << Err("quiet-missing");
}

TEST_F(RunIntegration, RefusesWhatDoesNotFitWithReasonAndExit2) {
  int status = Run({"--gpumem", "50000", "--", "true"}, "big");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string err = Err("big");
  EXPECT_EQ(err.rfind("tessera run: the slice does not fit on this machine:\n  GPU-", 0), 0u) << err;
  EXPECT_NE(err.find("(#0, NVIDIA A100-SXM4-40GB): not enough memory: 50000 MiB asked, 40960 MiB free\n"),
            std::string::npos)
      << err;
  // The GPU type filter is the job's --gpu-type, not a pod's; several slices
  // need as many GPUs. No Kubernetes wording leaks into the message.
  int typed = Run({"--gpu-type", "H100", "--", "true"}, "typed");
  ASSERT_TRUE(WIFEXITED(typed));
  EXPECT_EQ(WEXITSTATUS(typed), 2);
  EXPECT_NE(Err("typed").find("(#0, NVIDIA A100-SXM4-40GB): model does not match --gpu-type H100\n"),
            std::string::npos)
      << Err("typed");
  int two = Run({"--gpus", "2", "--", "true"}, "two");
  ASSERT_TRUE(WIFEXITED(two));
  EXPECT_EQ(WEXITSTATUS(two), 2);
  EXPECT_EQ(Err("two"),
            "tessera run: the job's 2 slices do not fit on this machine: they need 2 different GPUs, and it "
            "has 1\n");
  for (const char* tag : {"big", "typed", "two"}) {
    for (const char* k8s : {"pod", "container", "vGPU"}) {
      EXPECT_EQ(Err(tag).find(k8s), std::string::npos) << Err(tag);
    }
  }
  int bad = Run({"--gpucores", "150", "--", "true"}, "bad");
  ASSERT_TRUE(WIFEXITED(bad));
  EXPECT_EQ(WEXITSTATUS(bad), 2);
  EXPECT_NE(Err("bad").find("--gpucores"), std::string::npos) << Err("bad");
}

TEST_F(RunIntegration, ConcurrentInvocationsNeverOvercommitAGpu) {
  // Six jobs of 10000 MiB race for one 40960 MiB GPU; they hold their slice
  // until GO exists, so exactly four can be running at once.
  const std::string go = dir_ + "/GO";
  std::vector<pid_t> pids;
  // However the test ends (a failed ASSERT returns early), the jobs are let
  // go and reaped rather than left polling for GO; reaping one already
  // waited for is a harmless ECHILD.
  struct LetGo {
    const std::string& go;
    const std::vector<pid_t>& pids;
    ~LetGo() {
      std::ofstream(go).put('\n');
      for (pid_t p : pids) waitpid(p, nullptr, 0);
    }
  } let_go{go, pids};
  for (int i = 0; i < 6; ++i) {
    pids.push_back(
        Start({"--gpumem", "10000", "--", "sh", "-c", "while [ ! -e " + go + " ]; do sleep 0.02; done"},
              "job" + std::to_string(i)));
  }
  // Wait until every invocation has either taken a slice or been refused.
  std::map<pid_t, int> refused;
  ASSERT_TRUE(WaitFor([&] {
    for (pid_t p : pids) {
      int status = 0;
      if (!refused.count(p) && waitpid(p, &status, WNOHANG) == p) refused[p] = status;
    }
    return LiveSlices() + refused.size() == 6;
  }));
  EXPECT_EQ(LiveSlices(), 4u);
  ASSERT_EQ(refused.size(), 2u);
  for (const auto& [p, status] : refused) {
    // Seen once under a full parallel ctest (a refused job ended by a signal,
    // not reproduced in 45 runs alone): say which signal and what it printed.
    const std::string tag = "job" + std::to_string(std::find(pids.begin(), pids.end(), p) - pids.begin());
    ASSERT_TRUE(WIFEXITED(status)) << tag << " ended by signal "
                                   << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                   << "; its stderr: " << Err(tag) << "; stdout: " << Out(tag);
    EXPECT_EQ(WEXITSTATUS(status), 2) << tag << ": " << Err(tag);
  }
  std::ofstream(go).put('\n');
  for (pid_t p : pids) {
    if (!refused.count(p)) {
      int status = Wait(p);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  }
  EXPECT_EQ(LiveSlices(), 0u);
}

TEST_F(RunIntegration, AKilledJobReleasesItsSlice) {
  pid_t holder = Start({"--gpumem", "30000", "--", "sleep", "60"}, "holder");
  ASSERT_TRUE(WaitFor([&] { return LiveSlices() == 1; })) << Err("holder");
  int refused = Run({"--gpumem", "30000", "--", "true"}, "refused");
  ASSERT_TRUE(WIFEXITED(refused));
  EXPECT_EQ(WEXITSTATUS(refused), 2);
  kill(holder, SIGKILL);
  Wait(holder);
  int status = Run({"--gpumem", "30000", "--", "true"}, "after");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << Err("after");
}

// The share of its GPU a tessera-demo-job used over its run, from its last
// progress line: device time its kernels took / wall time (percent).
double ShareFromProgress(const std::string& out) {
  std::istringstream lines(out);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') last = line;
  }
  auto j = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("t") || j["t"].get<double>() <= 0) return -1;
  return 100.0 * j["busy_ms"].get<double>() / (j["t"].get<double>() * 1000.0);
}

TEST_F(RunIntegration, CorePolicyForceHoldsALoneJobToItsQuotaDefaultLetsItBorrow) {
  // 5 ms kernels, two in flight: enough queued work that a host waking late
  // on a loaded machine still keeps the device busy. Tolerances are wide
  // (±10 pp, as tests/integration/compute): the tight figures are benchmarks'.
  const std::vector<std::string> job = {TESSERA_DEMO_JOB, "--kernel-us", "5000",        "--duration-s", "2",
                                        "--mem-mib",      "64",          "--report-ms", "500"};
  auto run = [&](const std::string& policy) {
    std::vector<std::string> args = {"--gpumem", "1000", "--gpucores", "30", "--core-policy", policy, "--"};
    args.insert(args.end(), job.begin(), job.end());
    int status = Run(args, policy);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Err(policy);
    return ShareFromProgress(Out(policy));
  };
  const double forced = run("force");
  EXPECT_NEAR(forced, 30.0, 10.0) << Out("force") << Err("force");
  EXPECT_NE(Err("force").find("30% compute, --core-policy force"), std::string::npos) << Err("force");
  // Alone on the GPU, `default` (also what no flag gives) lets it use idle time.
  const double borrowing = run("default");
  EXPECT_GT(borrowing, 45.0) << Out("default");
}

TEST_F(RunIntegration, CorePolicyReachesTheJobOverAnInheritedOne) {
  // The job's GPU_CORE_UTILIZATION_POLICY is --core-policy's, also when the
  // caller's environment says otherwise; a wrong value is a usage error.
  for (const std::string policy : {"force", "default", "disable"}) {
    std::vector<std::string> argv = {TESSERA_EXE, "run", "--sim", "1xA100-40GB", "--ledger-dir", ledger_};
    if (policy != "default") argv.insert(argv.end(), {"--core-policy", policy});
    argv.insert(argv.end(), {"--", "sh", "-c", "echo \"$GPU_CORE_UTILIZATION_POLICY\""});
    int status = Wait(Exec(argv, "env-" + policy, {{"GPU_CORE_UTILIZATION_POLICY", "inherited"}}));
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Err("env-" + policy);
    EXPECT_EQ(Out("env-" + policy), policy + "\n");
  }
  int bad = Run({"--core-policy", "strict", "--", "true"}, "bad-policy");
  ASSERT_TRUE(WIFEXITED(bad));
  EXPECT_EQ(WEXITSTATUS(bad), 2);
  EXPECT_EQ(Err("bad-policy"),
            "tessera run: --core-policy: must be force, default or disable, got 'strict'\n");
}

TEST_F(RunIntegration, TheSliceIsEnforcedInsideTheJob) {
  // The program asks for 3000 MiB of device memory; its slice is 1000 MiB.
  int status = Run({"--gpumem", "1000", "--", TESSERA_DEMO_JOB, "--mem-mib", "3000", "--mem-step-mib", "100",
                    "--duration-s", "0.2", "--report-ms", "100"},
                   "mem");
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << Err("mem");
  std::istringstream lines(Out("mem"));
  std::string line, last;
  while (std::getline(lines, line)) last = line;
  EXPECT_NE(last.find("\"oom\":1"), std::string::npos) << last;
  // It got what fits in 1000 MiB after the context's share, never more.
  auto pos = last.find("\"mem_mib\":");
  ASSERT_NE(pos, std::string::npos);
  int mem = std::stoi(last.substr(pos + 10));
  EXPECT_GT(mem, 0);
  EXPECT_LE(mem, 1000);
  EXPECT_NE(Err("mem").find("limit"), std::string::npos) << Err("mem");
}

// The ledger entry of the job started by the `tessera run` with pid `holder`.
std::optional<LedgerEntry> EntryOf(const std::string& ledger_dir, pid_t holder) {
  SliceLedger ledger(ledger_dir);
  auto entries = ledger.List();
  if (!entries.ok()) return std::nullopt;
  for (const auto& e : *entries) {
    if (!e.holders.empty() && e.holders[0].pid == holder) return e;
  }
  return std::nullopt;
}

// The words of the line of `text` that starts with `first`.
std::vector<std::string> WordsOfLine(const std::string& text, const std::string& first) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(first, 0) != 0) continue;
    std::istringstream in(line);
    std::vector<std::string> words;
    std::string w;
    while (in >> w) words.push_back(w);
    return words;
  }
  return {};
}

TEST_F(RunIntegration, PsWithoutJobsSaysSo) {
  int status = Wait(Exec({TESSERA_EXE, "ps", "--ledger-dir", ledger_}, "ps"));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Err("ps");
  EXPECT_EQ(Out("ps"), "no running slices\n");
  int smi = Wait(Exec({TESSERA_EXE, "smi", "--sim", "1xA100-40GB", "--ledger-dir", ledger_}, "smi"));
  ASSERT_TRUE(WIFEXITED(smi) && WEXITSTATUS(smi) == 0) << Err("smi");
  EXPECT_NE(Out("smi").find("GPU 0  NVIDIA A100-SXM4-40GB  GPU-"), std::string::npos) << Out("smi");
  EXPECT_NE(Out("smi").find("40960 MiB total, 0 MiB allocated to slices, 0 MiB used by them"),
            std::string::npos)
      << Out("smi");
  EXPECT_NE(Out("smi").find("(no slices)"), std::string::npos) << Out("smi");
}

TEST_F(RunIntegration, PsAndSmiShowRunningJobsMemoryAndComputeAgainstTheirSlices) {
  // A job held to 30 % (force) that asks 3000 MiB of a 2000 MiB slice, and
  // one that never touches CUDA. Both run until the test stops them.
  pid_t busy =
      Start({"--gpumem", "2000", "--gpucores", "30", "--core-policy", "force", "--", TESSERA_DEMO_JOB,
             "--mem-mib", "3000", "--kernel-us", "2000", "--duration-s", "120", "--report-ms", "1000"},
            "busy");
  pid_t idle = Start({"--gpumem", "1000", "--", "sleep", "120"}, "idle");
  std::optional<LedgerEntry> busy_entry, idle_entry;
  // Ready once the busy job's allocations are done (the refused one counted).
  ASSERT_TRUE(WaitFor([&] {
    busy_entry = EntryOf(ledger_, busy);
    idle_entry = EntryOf(ledger_, idle);
    if (!busy_entry || !idle_entry) return false;
    auto region = host::ReadRegion(busy_entry->region_path);
    return region.ok() && !region->devices.empty() && region->devices[0].oom_refusals >= 1 &&
           region->devices[0].gpu_time_used_ns > 0;
  })) << Err("busy")
      << Err("idle");

  int status = Wait(Exec({TESSERA_EXE, "ps", "--ledger-dir", ledger_}, "ps"));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Err("ps");
  const std::string ps = Out("ps");
  // JOB PID GPU used / limit PEAK OOM used / quota POLICY COMMAND...
  auto b = WordsOfLine(ps, busy_entry->job_id);
  ASSERT_GE(b.size(), 13u) << ps;
  EXPECT_EQ(b[1], std::to_string(busy)) << ps;
  EXPECT_EQ(busy_entry->slices.devices[0].uuid.rfind(b[2], 0), 0u) << ps;
  EXPECT_GT(std::stoi(b[3]), 1000) << ps;  // most of its 2000 MiB, never more
  EXPECT_LE(std::stoi(b[3]), 2000) << ps;
  EXPECT_EQ(b[4] + b[5], "/2000") << ps;
  EXPECT_LE(std::stoi(b[6]), 2000) << ps;
  EXPECT_EQ(b[7], "1") << ps;  // the allocation past the limit was refused
  // Compute used over ps's window: a number, held near the 30 % quota
  // (generous: the window is short and the machine loaded).
  ASSERT_EQ(b[8].back(), '%') << ps;
  EXPECT_LE(std::stoi(b[8]), 45) << ps;
  EXPECT_EQ(b[9] + b[10] + b[11], "/30%force") << ps;
  EXPECT_EQ(b[12], "tessera-demo-job") << ps;  // the program's name, not its directory
  EXPECT_EQ(b[13], "--mem-mib") << ps;
  // The job that has not touched CUDA: its limits, zeros, nothing measured.
  auto i = WordsOfLine(ps, idle_entry->job_id);
  EXPECT_EQ(i, (std::vector<std::string>{idle_entry->job_id, std::to_string(idle), b[2], "0", "/", "1000",
                                         "0", "0", "-", "/", "none", "-", "sleep", "120"}))
      << ps;
  EXPECT_NE(ps.find("over the last 0.5 s"), std::string::npos) << ps;
  EXPECT_EQ(ps.find("SPILLED"), std::string::npos) << ps;

  int smi_status = Wait(Exec({TESSERA_EXE, "smi", "--sim", "1xA100-40GB", "--ledger-dir", ledger_}, "smi"));
  ASSERT_TRUE(WIFEXITED(smi_status) && WEXITSTATUS(smi_status) == 0) << Err("smi");
  const std::string smi = Out("smi");
  EXPECT_NE(smi.find("GPU 0  NVIDIA A100-SXM4-40GB  " + busy_entry->slices.devices[0].uuid),
            std::string::npos)
      << smi;
  EXPECT_NE(smi.find("40960 MiB total, 3000 MiB allocated to slices, " + b[3] +
                     " MiB used by them; cores "
                     "allocated: 30%"),
            std::string::npos)
      << smi;
  auto sb = WordsOfLine(smi, "    " + busy_entry->job_id);
  EXPECT_EQ(sb, (std::vector<std::string>{busy_entry->job_id, b[3], "/", "2000", "MiB", "cores", "30%",
                                          "force", "tessera-demo-job", "--mem-mib", "3000", "--ker..."}))
      << smi;
  auto si = WordsOfLine(smi, "    " + idle_entry->job_id);
  EXPECT_EQ(si, (std::vector<std::string>{idle_entry->job_id, "0", "/", "1000", "MiB", "cores", "-", "sleep",
                                          "120"}))
      << smi;

  kill(busy, SIGTERM);
  kill(idle, SIGTERM);
  Wait(busy);
  Wait(idle);
  Wait(Exec({TESSERA_EXE, "ps", "--ledger-dir", ledger_}, "ps-after"));
  EXPECT_EQ(Out("ps-after"), "no running slices\n");
}

TEST_F(RunIntegration, PsShowsMemorySpilledToTheHost) {
  // A simulated GPU whose managed memory may exceed the device, most of it
  // taken by a program outside tessera; the job's cuMemAlloc past what the
  // device has left (its limit allows it) is served from the host under
  // CUDA_OVERSUBSCRIBE, and ps shows how much.
  const std::string config = "gpus:\n  - model: A100-40GB\nmanaged_oversubscription: true\n";
  const ::tessera::testing::Env sim_env = {{"TESSERA_SIM_CONFIG", config}, {"CUDA_OVERSUBSCRIBE", "true"}};
  const std::string sim_lib = (fs::path(TESSERA_EXE).parent_path().parent_path() / "lib" / "sim").string();
  pid_t hog =
      Exec({"/usr/bin/env", "LD_LIBRARY_PATH=" + sim_lib, TESSERA_DEMO_JOB, "--mem-mib", "39000",
            "--mem-step-mib", "1000", "--kernel-us", "100000", "--duration-s", "120", "--report-ms", "100"},
           "hog", sim_env);
  ASSERT_TRUE(WaitFor([&] { return Out("hog").find("\"mem_mib\":39000") != std::string::npos; }))
      << Out("hog") << Err("hog");
  pid_t job = Exec({TESSERA_EXE, "run", "--sim", "1xA100-40GB", "--ledger-dir", ledger_, "--gpumem", "4000",
                    "--", TESSERA_DEMO_JOB, "--mem-mib", "3000", "--kernel-us", "100000", "--duration-s",
                    "120", "--report-ms", "100"},
                   "spill", sim_env);
  ASSERT_TRUE(WaitFor([&] { return Out("spill").find("\"mem_mib\":3000") != std::string::npos; }))
      << Out("spill") << Err("spill");
  auto entry = EntryOf(ledger_, job);
  ASSERT_TRUE(entry);
  auto region = host::ReadRegion(entry->region_path);
  ASSERT_TRUE(region.ok());
  const uint64_t spilled_mib = (region->devices.at(0).memory_spilled_bytes + (1 << 20) - 1) >> 20;
  EXPECT_GT(spilled_mib, 1000u);  // about 3000 - (40960 - 39000 - 2 contexts)

  Wait(Exec({TESSERA_EXE, "ps", "--ledger-dir", ledger_}, "ps"));
  const std::string ps = Out("ps");
  EXPECT_NE(ps.find("SPILLED MiB"), std::string::npos) << ps;
  auto row = WordsOfLine(ps, entry->job_id);
  ASSERT_GE(row.size(), 9u) << ps;
  EXPECT_EQ(row[4] + row[5], "/4000") << ps;
  EXPECT_EQ(row[7], std::to_string(spilled_mib)) << ps;
  Wait(Exec({TESSERA_EXE, "smi", "--sim", "1xA100-40GB", "--ledger-dir", ledger_}, "smi", sim_env));
  EXPECT_NE(Out("smi").find("MiB (" + std::to_string(spilled_mib) + " MiB spilled to host)"),
            std::string::npos)
      << Out("smi") << Err("smi");
  kill(job, SIGTERM);
  kill(hog, SIGTERM);
  Wait(job);
  Wait(hog);
}

}  // namespace
}  // namespace tessera::runner

namespace tessera::runner {
namespace {

struct SummaryRow {
  std::string job;
  int quota = 0;
  double achieved = 0;
  double max_1s = 0;  // highest 1-second window
  int limit_mib = 0;
  int peak_mib = 0;
  int oom = 0;
  int exit = -1;
};

// Parses the demo's summary.txt (the table it prints).
std::vector<SummaryRow> ParseSummary(const std::string& text) {
  std::vector<SummaryRow> rows;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    SummaryRow r;
    std::string gpu, quota, achieved, max1s;
    f >> r.job >> gpu >> quota >> achieved >> max1s >> r.limit_mib >> r.peak_mib >> r.oom >> r.exit;
    if (!f) continue;
    r.quota = std::stoi(quota);
    r.achieved = std::stod(achieved);
    r.max_1s = std::stod(max1s);
    rows.push_back(r);
  }
  return rows;
}

TEST(RunDemo, ProducesItsTableWithEveryJobWithinItsMemoryLimitAndComputeQuota) {
  ::tessera::testing::TempDir dir("tessera-demo-it");
  const std::string out = dir.Path("out");
  const int status = ::tessera::testing::WaitStatus(
      ::tessera::testing::Spawn({.argv = {TESSERA_EXE, "demo", "--seconds", "4", "--no-live", "--out", out},
                                 .stdout_path = "/dev/null"}));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string summary = ReadFileOrEmpty(out + "/summary.txt");
  auto rows = ParseSummary(summary);
  ASSERT_EQ(rows.size(), 4u) << summary;
  const std::map<std::string, int> quotas = {
      {"trainer", 40}, {"memory-hog", 20}, {"compute-hog", 20}, {"inference", 30}};
  for (const auto& r : rows) {
    EXPECT_EQ(r.exit, 0) << r.job;
    EXPECT_GT(r.peak_mib, 0) << r.job;
    EXPECT_LE(r.peak_mib, r.limit_mib) << r.job;
    if (r.job == "memory-hog") {
      EXPECT_GE(r.oom, 1);
    }
    // Compute: every job saturates its share (the compute-hog tries to take
    // the whole GPU) and runs under --core-policy force, so each gets about
    // its quota and none gets far above it. Device time the job measured over
    // its whole run; generous bounds, as the machine running tests is loaded
    // (a starved host leaves a job below its quota, never above).
    ASSERT_TRUE(quotas.count(r.job)) << r.job;
    EXPECT_EQ(r.quota, quotas.at(r.job)) << summary;
    EXPECT_LE(r.achieved, r.quota + 10.0) << r.job << "\n" << summary;
    EXPECT_GE(r.achieved, r.quota / 2.0) << r.job << "\n" << summary;
    EXPECT_LE(r.max_1s, r.quota + 15.0) << r.job << "\n" << summary;
  }
  EXPECT_TRUE(fs::exists(out + "/compute-share.svg"));
  EXPECT_NE(ReadFileOrEmpty(out + "/compute-share.svg").find("<polyline"), std::string::npos);
}

}  // namespace
}  // namespace tessera::runner
