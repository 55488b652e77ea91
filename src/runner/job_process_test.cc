#include "runner/job_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "base/testing.h"

namespace tessera::runner {
namespace {

using ::tessera::testing::WaitFor;

// Starts a supervisor (as `tessera run` would) in a child process, so
// ExitLike's effect on a process can be observed; returns its pid.
pid_t StartSupervisor(const JobSpec& spec) {
  pid_t sup = fork();
  if (sup == 0) {
    auto pid = StartJob(spec);
    if (!pid.ok()) _exit(99);
    ExitLike(WaitForJob(*pid));
  }
  return sup;
}

// The supervisor's raw wait status once it ended.
int SuperviseInChild(const JobSpec& spec) {
  int status = 0;
  waitpid(StartSupervisor(spec), &status, 0);
  return status;
}

TEST(JobProcess, PassesExitCodeThrough) {
  int status = SuperviseInChild({{"sh", "-c", "exit 7"}, {}, {}});
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST(JobProcess, PassesDeathBySignalThrough) {
  int status = SuperviseInChild({{"sh", "-c", "kill -TERM $$"}, {}, {}});
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(JobProcess, MissingCommandExits127) {
  int status = SuperviseInChild({{"/nonexistent/tessera-no-such-command"}, {}, {}});
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 127);
}

TEST(JobProcess, SetsAndPrependsEnvironment) {
  ::tessera::testing::TempDir tmp("tessera-job-env");
  const std::string path = tmp.path() + "/env";
  setenv("TESSERA_TEST_PATHLIKE", "/old", 1);
  JobSpec spec{{"sh", "-c", "echo \"$TESSERA_TEST_SET|$TESSERA_TEST_PATHLIKE\" > " + path},
               {{"TESSERA_TEST_SET", "yes"}},
               {{"TESSERA_TEST_PATHLIKE", "/new"}}};
  int status = SuperviseInChild(spec);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(tmp.Read("env"), "yes|/new:/old\n");
}

TEST(JobProcess, TheJobStartsWithTheSignalMaskItIsGiven) {
  // A supervisor that blocks SIGTERM while it starts the job (as `tessera run
  // --mig` does): the job inherits the block unless given its own mask.
  ::tessera::testing::TempDir tmp("tessera-job-mask");
  auto blocked_in_job = [&](bool give_mask) {
    const std::string out = tmp.path() + (give_mask ? "/given" : "/inherited");
    pid_t sup = fork();
    if (sup == 0) {
      sigset_t term, previous;
      sigemptyset(&term);
      sigaddset(&term, SIGTERM);
      sigprocmask(SIG_BLOCK, &term, &previous);
      // cp's own status (a shell might reset its mask).
      JobSpec spec{{"cp", "/proc/self/status", out}, {}, {}};
      if (give_mask) spec.signal_mask = previous;
      auto pid = StartJob(spec);
      if (!pid.ok()) _exit(99);
      ExitLike(WaitForJob(*pid));
    }
    waitpid(sup, nullptr, 0);
    const std::string status = tmp.Read(give_mask ? "given" : "inherited");
    const auto at = status.find("SigBlk:");
    return at == std::string::npos ? ~0ull : std::stoull(status.substr(at + 7), nullptr, 16);
  };
  const unsigned long long term_bit = 1ull << (SIGTERM - 1);
  EXPECT_NE(blocked_in_job(false) & term_bit, 0u);
  EXPECT_EQ(blocked_in_job(true) & term_bit, 0u);
}

TEST(JobProcess, ForwardsSignalsToTheJob) {
  // The job traps TERM and exits 42, proving it received the forwarded signal.
  ::tessera::testing::TempDir tmp("tessera-job-ready");
  const std::string ready = tmp.path() + "/ready";
  pid_t sup = StartSupervisor(
      {{"sh", "-c", "trap 'exit 42' TERM; touch " + ready + "; while :; do sleep 0.05; done"}, {}, {}});
  ASSERT_TRUE(WaitFor([&] { return access(ready.c_str(), F_OK) == 0; })) << "job never started";
  kill(sup, SIGTERM);
  int status = 0;
  waitpid(sup, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);
}

TEST(JobProcess, JobDiesWithItsSupervisor) {
  ::tessera::testing::TempDir tmp("tessera-job-pid");
  const std::string pidfile = tmp.path() + "/pid";
  pid_t sup = StartSupervisor(
      {{"sh", "-c", "echo $$ > " + pidfile + ".tmp; mv " + pidfile + ".tmp " + pidfile + "; exec sleep 60"},
       {},
       {}});
  pid_t job = 0;
  ASSERT_TRUE(WaitFor([&] { return (job = std::atoi(tmp.Read("pid").c_str())) > 0; }));
  kill(sup, SIGKILL);
  waitpid(sup, nullptr, 0);
  // The orphaned job is reparented and killed by PDEATHSIG; wait for it to vanish.
  EXPECT_TRUE(WaitFor([&] { return kill(job, 0) != 0; }));
}

}  // namespace
}  // namespace tessera::runner
