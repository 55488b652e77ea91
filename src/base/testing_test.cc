#include "base/testing.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

TEST(TempDirTest, IsAFreshDirectoryRemovedWithItsContents) {
  std::string kept;
  {
    TempDir a("tessera-tempdir-test");
    TempDir b("tessera-tempdir-test");
    EXPECT_NE(a.path(), b.path());
    EXPECT_TRUE(fs::is_directory(a.path()));
    EXPECT_TRUE(fs::is_empty(a.path()));
    EXPECT_NE(fs::path(a.path()).filename().string().find("tessera-tempdir-test-"), std::string::npos);
    a.Write("nested/deeper/file.txt", "contents");
    kept = a.path();
  }
  EXPECT_FALSE(fs::exists(kept));
}

TEST(TempDirTest, WritesReadsAndMakesDirectories) {
  TempDir dir;
  const std::string path = dir.Write("sub/config.yaml", "a: 1\n");
  EXPECT_EQ(path, dir.path() + "/sub/config.yaml");
  EXPECT_EQ(dir.Read("sub/config.yaml"), "a: 1\n");
  EXPECT_EQ(ReadFileOrEmpty(path), "a: 1\n");
  dir.Write("sub/config.yaml", "b");  // replaced, not appended
  EXPECT_EQ(dir.Read("sub/config.yaml"), "b");
  EXPECT_EQ(dir.Read("missing"), "");
  EXPECT_TRUE(fs::is_directory(dir.MakeDir("x/y")));
  EXPECT_EQ(dir.Path("x/y"), dir.path() + "/x/y");
}

TEST(TempDirTest, LivesUnderTmpdir) {
  TempDir parent;
  const char* old = std::getenv("TMPDIR");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  ::setenv("TMPDIR", parent.path().c_str(), 1);
  {
    TempDir child;
    EXPECT_EQ(fs::path(child.path()).parent_path().string(), parent.path());
  }
  if (saved) {
    ::setenv("TMPDIR", saved->c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  EXPECT_TRUE(fs::is_empty(parent.path()));
}

}  // namespace
}  // namespace tessera::testing
