#include "testing/process.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "base/testing.h"
#include "testing/sim_gpu.h"

namespace tessera::testing {
namespace {

TEST(ProcessTest, RunToEndCapturesBothStreamsApartAndTheExitCode) {
  TempDir dir;
  Outcome r = RunToEnd({.argv = {"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}}, dir.path());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
}

TEST(ProcessTest, EnvironmentIsAddedToOrReplaced) {
  TempDir dir;
  ::setenv("TESSERA_PROCESS_TEST_INHERITED", "yes", 1);
  const char* script = "echo \"$TESSERA_PROCESS_TEST_INHERITED/$TESSERA_PROCESS_TEST_SET\"";
  Outcome added =
      RunToEnd({.argv = {"/bin/sh", "-c", script}, .env = {{"TESSERA_PROCESS_TEST_SET", "set"}}}, dir.path());
  EXPECT_EQ(added.out, "yes/set\n");
  Outcome cleared = RunToEnd(
      {.argv = {"/bin/sh", "-c", script}, .env = {{"TESSERA_PROCESS_TEST_SET", "set"}}, .clear_env = true},
      dir.path());
  EXPECT_EQ(cleared.out, "/set\n");
  ::unsetenv("TESSERA_PROCESS_TEST_INHERITED");
}

TEST(ProcessTest, OneFileForBothStreamsMergesThem) {
  TempDir dir;
  const std::string log = dir.Path("log");
  pid_t pid =
      Spawn({.argv = {"/bin/sh", "-c", "echo one; echo two >&2"}, .stdout_path = log, .stderr_path = log});
  ASSERT_GT(pid, 0);
  EXPECT_EQ(ExitCode(WaitStatus(pid)), 0);
  EXPECT_EQ(dir.Read("log"), "one\ntwo\n");
}

TEST(ProcessTest, InChildRunsBeforeExec) {
  TempDir dir;
  Outcome r = RunToEnd({.argv = {"/bin/sh", "-c", "ulimit -n"},
                        .in_child =
                            [] {
                              rlimit limit{64, 64};
                              ::setrlimit(RLIMIT_NOFILE, &limit);
                            }},
                       dir.path());
  EXPECT_EQ(r.out, "64\n");
}

TEST(ProcessTest, ASignalIs128PlusItAndTheRawStatusKeepsIt) {
  pid_t pid = Spawn({.argv = {"/bin/sh", "-c", "kill -TERM $$"}});
  ASSERT_GT(pid, 0);
  const int status = WaitStatus(pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(ExitCode(status), 128 + SIGTERM);
}

TEST(ProcessTest, WhatCannotStartSaysSoByItsExitCode) {
  TempDir dir;
  EXPECT_EQ(RunToEnd({.argv = {dir.Path("no-such-program")}}, dir.path()).exit_code, 127);
  EXPECT_EQ(RunToEnd({.argv = {}}, dir.path()).exit_code, 127);
  pid_t pid = Spawn({.argv = {"/bin/true"}, .stdout_path = dir.Path("missing-dir/out")});
  EXPECT_EQ(ExitCode(WaitStatus(pid)), 125);
}

TEST(ProcessTest, KillAndWaitEndsTheProcessAndForgetsIt) {
  pid_t pid = Spawn({.argv = {"/bin/sleep", "600"}});
  ASSERT_GT(pid, 0);
  const pid_t was = pid;
  KillAndWait(pid, SIGKILL);
  EXPECT_EQ(pid, -1);
  EXPECT_NE(::kill(was, 0), 0);  // reaped: no such process (or, rarely, a new one of that pid)
  KillAndWait(pid, SIGKILL);     // a second call does nothing
}

TEST(ProcessTest, RunShellMergesOutputAndQuotingSurvivesTheShell) {
  const std::string awkward = "it's a \"test\" $HOME `x` \\ ;";
  ShellOutcome r = RunShell("printf '%s' " + ShellQuote(awkward) + "; echo err >&2; exit 4");
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.output, awkward + "err\n");
}

TEST(SimGpuTest, PutsAProcessOnTheNamedMachineWithOverrides) {
  TempDir dir;
  SimGpu gpu{.gpus = "1xL4", .state_dir = dir.Path("sim"), .lib_dir = "/opt/sim"};
  const Env env = gpu.Environment();
  EXPECT_EQ(env.at("TESSERA_SIM_GPUS"), "1xL4");
  EXPECT_EQ(env.at("TESSERA_SIM_STATE"), dir.Path("sim"));
  EXPECT_EQ(env.at("LD_LIBRARY_PATH"), "/opt/sim");
  EXPECT_EQ(SimGpu{.state_dir = "s"}.Environment().count("LD_LIBRARY_PATH"), 0u);

  const std::string out = dir.Path("out");
  pid_t pid = SpawnOnSimGpu(gpu, {.argv = {"/bin/sh", "-c", "echo $TESSERA_SIM_GPUS $TESSERA_SIM_STATE"},
                                  .env = {{"TESSERA_SIM_GPUS", "2xH100-80GB"}},
                                  .stdout_path = out});
  EXPECT_EQ(ExitCode(WaitStatus(pid)), 0);
  EXPECT_EQ(dir.Read("out"), "2xH100-80GB " + dir.Path("sim") + "\n");
}

TEST(SimGpuTest, AContainerCommandCarriesOnlyWhatAContainerWouldHave) {
  TempDir dir;
  SimGpu gpu{.gpus = "1xL4", .state_dir = dir.Path("sim"), .lib_dir = "/opt/sim"};
  EXPECT_EQ(ContainerCommand(gpu, {"/bin/true"}, "/r", "/lib/libvgpu.so").env.at("LD_PRELOAD"),
            "/lib/libvgpu.so");

  ::setenv("TESSERA_PROCESS_TEST_INHERITED", "yes", 1);
  Outcome r = RunToEnd(ContainerCommand(gpu, {"/usr/bin/env"}, "/r/vgpu.region", ""), dir.path());
  ::unsetenv("TESSERA_PROCESS_TEST_INHERITED");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"TESSERA_REGION=/r/vgpu.region\n", "LD_LIBRARY_PATH=/opt/sim\n",
                           "TESSERA_SIM_GPUS=1xL4\n", "PATH=/usr/bin:/bin\n"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << " not in\n" << r.out;
  }
  EXPECT_EQ(r.out.find("TESSERA_PROCESS_TEST_INHERITED"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("LD_PRELOAD"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tessera::testing
