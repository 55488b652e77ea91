// What the simulator's unit tests share: a fresh directory for a test's
// simulator state, removed afterwards.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "base/testing.h"

namespace tessera::sim {

class StateDirTest : public ::testing::Test {
 protected:
  ::tessera::testing::TempDir tmp_{"tessera-simstate"};
  const std::string dir_ = tmp_.path();
};

}  // namespace tessera::sim
