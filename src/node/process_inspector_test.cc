#include "node/process_inspector.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "base/testing.h"

namespace tessera::node {
namespace {

namespace fs = std::filesystem;

// A child that sleeps with a known environment; reaped by the fixture.
class ProcessInspectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    child_ = ::fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      char* const argv[] = {const_cast<char*>("sleep"), const_cast<char*>("60"), nullptr};
      char* const envp[] = {const_cast<char*>("ACTIVE_OOM_KILLER=true"),
                            const_cast<char*>("CUDA_DEVICE_MEMORY_LIMIT_0=2g"),
                            const_cast<char*>("SECRET_TOKEN=not-for-the-agent"), nullptr};
      ::execve("/bin/sleep", argv, envp);
      ::_exit(127);
    }
    // Wait until the child has exec'd (its environment is the new one).
    for (int i = 0; i < 500; ++i) {
      auto p = ProcFsInspector(dir_).Inspect(static_cast<uint32_t>(child_));
      if (p && p->environment.count("ACTIVE_OOM_KILLER")) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  void TearDown() override {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
  }
  ::tessera::testing::TempDir tmp_{"tn-inspect"};
  const std::string dir_ = tmp_.path();
  pid_t child_ = -1;
};

TEST_F(ProcessInspectorTest, SeesTheRegionDirectoryPidAndContractEnvironment) {
  ProcFsInspector inspector(dir_);
  auto p = inspector.Inspect(static_cast<uint32_t>(child_));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->host_pid, static_cast<uint32_t>(child_));
  EXPECT_EQ(p->container_pid, static_cast<uint32_t>(child_));  // same pid namespace here
  EXPECT_EQ(p->command, "sleep");
  EXPECT_GT(p->start_ticks, 0u);
  struct stat st {};
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_TRUE(p->sees_region_dir);
  EXPECT_EQ(p->region_dev, st.st_dev);
  EXPECT_EQ(p->region_ino, st.st_ino);
  EXPECT_EQ(p->environment.at("ACTIVE_OOM_KILLER"), "true");
  EXPECT_EQ(p->environment.at("CUDA_DEVICE_MEMORY_LIMIT_0"), "2g");
  EXPECT_EQ(p->environment.count("SECRET_TOKEN"), 0u) << "only the contract's variables are kept";

  EXPECT_FALSE(ProcFsInspector(dir_ + "/elsewhere").Inspect(static_cast<uint32_t>(child_))->sees_region_dir);
}

TEST_F(ProcessInspectorTest, AGoneProcessIsNotInspected) {
  ::kill(child_, SIGKILL);
  ::waitpid(child_, nullptr, 0);
  EXPECT_FALSE(ProcFsInspector(dir_).Inspect(static_cast<uint32_t>(child_)).has_value());
  child_ = -1;
}

TEST_F(ProcessInspectorTest, KillsOnlyTheProcessThatWasInspected) {
  ProcFsInspector inspector(dir_);
  auto p = inspector.Inspect(static_cast<uint32_t>(child_));
  ASSERT_TRUE(p.has_value());
  ProcessIdentity impostor = *p;
  impostor.start_ticks += 1;  // as if the pid now named a newer process
  auto refused = inspector.Kill(impostor);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("another process"), std::string::npos) << refused.error().message;
  EXPECT_EQ(::kill(child_, 0), 0) << "the process must still be alive";

  ASSERT_TRUE(inspector.Kill(*p).ok());
  int status = 0;
  ASSERT_EQ(::waitpid(child_, &status, 0), child_);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  child_ = -1;
}

}  // namespace
}  // namespace tessera::node
