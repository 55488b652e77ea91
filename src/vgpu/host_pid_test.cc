#include "vgpu/host_pid.h"

#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "base/testing.h"

namespace tessera::vgpu {
namespace {

TEST(HostPidTest, KnownExactlyInTheInitialPidNamespace) {
  struct stat st {};
  ASSERT_EQ(stat("/proc/self/ns/pid", &st), 0);
  bool initial = static_cast<uint64_t>(st.st_ino) == kInitialPidNamespaceInode;
  EXPECT_EQ(in_initial_pid_namespace(), initial);
  EXPECT_EQ(host_pid_of_self(), initial ? static_cast<uint32_t>(getpid()) : 0u);
}

TEST(HostPidTest, UnknownInAChildPidNamespaceEvenWithTheHostsProc) {
  if (!in_initial_pid_namespace()) GTEST_SKIP() << "the test itself runs in a pid namespace";
  // A child pid namespace (needs CAP_SYS_ADMIN); /proc stays the host's, so
  // /proc/self still resolves, to a namespace that is not the initial one.
  pid_t outer = fork();
  ASSERT_GE(outer, 0);
  if (outer == 0) {
    if (unshare(CLONE_NEWPID) != 0) _exit(77);
    pid_t inner = fork();
    if (inner == 0) _exit(host_pid_of_self() == 0 && !in_initial_pid_namespace() ? 0 : 1);
    int status = 0;
    waitpid(inner, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 2);
  }
  int status = 0;
  waitpid(outer, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot create a pid namespace here (not root?)";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(HostPidTest, UnknownWithoutAReadableProc) {
  ::tessera::testing::TempDir tmp("tessera-hostpid");
  const std::string root = tmp.path();
  // A "proc" whose self/ns/pid is an ordinary file: not the namespace inode.
  ASSERT_EQ(mkdir((root + "/self").c_str(), 0700), 0);
  ASSERT_EQ(mkdir((root + "/self/ns").c_str(), 0700), 0);
  { std::ofstream(root + "/self/ns/pid") << "x"; }
  EXPECT_FALSE(in_initial_pid_namespace(root.c_str()));
  EXPECT_EQ(host_pid_of_self((root + "/missing").c_str()), 0u);
}

}  // namespace
}  // namespace tessera::vgpu
