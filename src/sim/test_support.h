// What the simulator's unit tests share: a fresh directory for a test's
// simulator state, removed afterwards.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace tessera::sim {

class StateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-simstate-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf '" + dir_ + "'").c_str()), 0); }
  std::string dir_;
};

}  // namespace tessera::sim
