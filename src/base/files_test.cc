#include "base/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/testing.h"

namespace tessera::files {
namespace {

class FilesTest : public ::testing::Test {
 protected:
  ::tessera::testing::TempDir tmp_{"tessera-files"};
  const std::string dir_ = tmp_.path();
};

TEST_F(FilesTest, ReadReturnsTheBytesOrNamesThePath) {
  const std::string path = dir_ + "/a.bin";
  const std::string content("line 1\n\0binary\xff", 15);
  std::ofstream(path, std::ios::binary) << content;
  auto read = Read(path);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(*read, content);
  EXPECT_EQ(*Read(dir_ + "/a.bin"), content);

  auto missing = Read(dir_ + "/none");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "cannot read '" + dir_ + "/none': No such file or directory");
  auto directory = Read(dir_);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().message, "cannot read '" + dir_ + "': Is a directory");
}

TEST_F(FilesTest, ReplaceAtomicallyLeavesTheNewContentAndNoTemporaryFile) {
  const std::string path = dir_ + "/preload";
  ASSERT_TRUE(ReplaceAtomically(path, "old\n").ok());
  ASSERT_TRUE(ReplaceAtomically(path, "new\n").ok());
  EXPECT_EQ(*Read(path), "new\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1);

  Status failed = ReplaceAtomically(dir_ + "/no/such/dir/file", "x");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().message, "cannot write " + dir_ + "/no/such/dir/file.tmp." +
                                        std::to_string(::getpid()) + ": No such file or directory");
}

TEST(Files, JoinAddsOneSlash) {
  EXPECT_EQ(Join("/var/lib", "kubelet.sock"), "/var/lib/kubelet.sock");
  EXPECT_EQ(Join("/var/lib/", "kubelet.sock"), "/var/lib/kubelet.sock");
  EXPECT_EQ(Join("", "x"), "/x");
  EXPECT_EQ(Join("rel", "x"), "rel/x");
}

TEST_F(FilesTest, MakeDirsCreatesParentsAndAcceptsExistingOnes) {
  const std::string deep = dir_ + "/a/b//c/";
  ASSERT_TRUE(MakeDirs(deep).ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/a/b/c"));
  EXPECT_TRUE(MakeDirs(deep).ok());
  ASSERT_TRUE(MakeDirs(dir_ + "/private", 0700).ok());
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/private").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u);  // the mode asked for, whatever the umask adds

  std::ofstream(dir_ + "/file") << "x";
  Status blocked = MakeDirs(dir_ + "/file/sub");
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.error().message, "cannot create directory '" + dir_ + "/file/sub': Not a directory");
  Status in_the_way = MakeDirs(dir_ + "/file");
  ASSERT_FALSE(in_the_way.ok());
  EXPECT_EQ(in_the_way.error().message,
            "cannot create directory '" + dir_ + "/file': a file of that name is in the way");
}

}  // namespace
}  // namespace tessera::files
