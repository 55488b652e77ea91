#include "runner/job_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

namespace tessera::runner {
namespace {

// Runs a supervisor (as `tessera run` would) in a child process and returns its
// raw wait status, so ExitLike's effect on the process can be observed.
int SuperviseInChild(const JobSpec& spec) {
  pid_t sup = fork();
  if (sup == 0) {
    auto pid = StartJob(spec);
    if (!pid.ok()) _exit(99);
    ExitLike(WaitForJob(*pid));
  }
  int status = 0;
  waitpid(sup, &status, 0);
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
  char path[] = "/tmp/tessera-job-env-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  setenv("TESSERA_TEST_PATHLIKE", "/old", 1);
  JobSpec spec{{"sh", "-c", std::string("echo \"$TESSERA_TEST_SET|$TESSERA_TEST_PATHLIKE\" > ") + path},
               {{"TESSERA_TEST_SET", "yes"}},
               {{"TESSERA_TEST_PATHLIKE", "/new"}}};
  int status = SuperviseInChild(spec);
  ASSERT_TRUE(WIFEXITED(status));
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "yes|/new:/old");
  unlink(path);
}

TEST(JobProcess, ForwardsSignalsToTheJob) {
  // The job traps TERM and exits 42, proving it received the forwarded signal.
  char ready[] = "/tmp/tessera-job-ready-XXXXXX";
  int fd = mkstemp(ready);
  ASSERT_GE(fd, 0);
  close(fd);
  unlink(ready);
  pid_t sup = fork();
  if (sup == 0) {
    auto pid = StartJob(
        {{"sh", "-c", std::string("trap 'exit 42' TERM; touch ") + ready + "; while :; do sleep 0.05; done"},
         {},
         {}});
    if (!pid.ok()) _exit(99);
    ExitLike(WaitForJob(*pid));
  }
  for (int i = 0; i < 2000 && access(ready, F_OK) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(access(ready, F_OK), 0) << "job never started";
  kill(sup, SIGTERM);
  int status = 0;
  waitpid(sup, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);
  unlink(ready);
}

TEST(JobProcess, JobDiesWithItsSupervisor) {
  char pidfile[] = "/tmp/tessera-job-pid-XXXXXX";
  int fd = mkstemp(pidfile);
  ASSERT_GE(fd, 0);
  close(fd);
  pid_t sup = fork();
  if (sup == 0) {
    auto pid = StartJob({{"sh", "-c",
                          std::string("echo $$ > ") + pidfile + ".tmp; mv " + pidfile + ".tmp " + pidfile +
                              "; exec sleep 60"},
                         {},
                         {}});
    if (!pid.ok()) _exit(99);
    ExitLike(WaitForJob(*pid));
  }
  pid_t job = 0;
  for (int i = 0; i < 2000 && job == 0; ++i) {
    std::ifstream in(pidfile);
    in >> job;
    if (job == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(job, 0);
  kill(sup, SIGKILL);
  waitpid(sup, nullptr, 0);
  // The orphaned job is reparented and killed by PDEATHSIG; wait for it to vanish.
  bool gone = false;
  for (int i = 0; i < 2000 && !gone; ++i) {
    gone = kill(job, 0) != 0;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(gone);
  unlink(pidfile);
}

}  // namespace
}  // namespace tessera::runner
