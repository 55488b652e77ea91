#include "base/command_line.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera {
namespace {

struct Program {
  CLI::App app{"a test program"};
  int port = 0;
  Program() { app.add_option("--port", port, "a port")->check(CLI::Range(1, 65535)); }
};

TEST(ParseCommandLineTest, GoesOnWithValidFlags) {
  Program p;
  const char* argv[] = {"prog", "--port", "8080"};
  EXPECT_EQ(ParseCommandLine(p.app, 3, argv), std::nullopt);
  EXPECT_EQ(p.port, 8080);
}

TEST(ParseCommandLineTest, HelpEndsWithZero) {
  Program p;
  const char* argv[] = {"prog", "--help"};
  testing::internal::CaptureStdout();
  EXPECT_EQ(ParseCommandLine(p.app, 2, argv), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("--port"), std::string::npos);
}

TEST(ParseCommandLineTest, UsageErrorsEndWithTwoAndSayWhy) {
  for (const char* bad : {"--no-such-flag", "--port=0"}) {
    SCOPED_TRACE(bad);
    Program p;
    const char* argv[] = {"prog", bad};
    testing::internal::CaptureStderr();
    EXPECT_EQ(ParseCommandLine(p.app, 2, argv), 2);
    EXPECT_FALSE(testing::internal::GetCapturedStderr().empty());
  }
}

}  // namespace
}  // namespace tessera
