#include "host/paths.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace tessera::host {
namespace {

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(PathsTest, TheRunStateDirectoryFollowsTheEnvironment) {
  {
    ScopedEnv state("TESSERA_RUN_STATE", "/somewhere/state");
    ScopedEnv xdg("XDG_RUNTIME_DIR", "/run/user/1000");
    EXPECT_EQ(DefaultRunStateDir(), "/somewhere/state");
  }
  ScopedEnv state("TESSERA_RUN_STATE", nullptr);
  {
    ScopedEnv xdg("XDG_RUNTIME_DIR", "/run/user/1000");
    EXPECT_EQ(DefaultRunStateDir(), ::geteuid() == 0 ? "/run/tessera" : "/run/user/1000/tessera");
  }
  ScopedEnv xdg("XDG_RUNTIME_DIR", nullptr);
  EXPECT_EQ(DefaultRunStateDir(),
            ::geteuid() == 0 ? std::string("/run/tessera") : "/tmp/tessera-" + std::to_string(::geteuid()));
}

TEST(PathsTest, AnEmptyVariableCountsAsUnset) {
  ScopedEnv state("TESSERA_RUN_STATE", "");
  ScopedEnv xdg("XDG_RUNTIME_DIR", "/run/user/1000");
  EXPECT_EQ(DefaultRunStateDir(), ::geteuid() == 0 ? "/run/tessera" : "/run/user/1000/tessera");
}

}  // namespace
}  // namespace tessera::host
