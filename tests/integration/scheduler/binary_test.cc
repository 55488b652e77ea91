// The tessera-scheduler binary's start-up contract.
#include "base/testing.h"
#include "fixture.h"
#include "testing/process.h"

namespace tessera::scheduler::it {
namespace {

using BinaryRun = ::tessera::testing::ShellOutcome;

BinaryRun RunBinary(const std::string& args) {
  // `timeout` bounds every run: a binary that does not exit fails the test.
  return ::tessera::testing::RunShell("timeout 60 " + std::string(TESSERA_SCHEDULER_BIN) + " " + args);
}

TEST(SchedulerBinaryTest, HelpListsEveryKeyAndBadConfigExitsWithTwo) {
  BinaryRun help = RunBinary("--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* key : {"schedulerName", "resources.gpuCount", "defaults.memoryMiB", "policy.gpu",
                          "reservationTimeoutSeconds", "inventoryStaleSeconds", "server.tlsCertFile",
                          "kube.timeoutSeconds", "leaderElection.renewDeadlineSeconds", "logLevel"}) {
    EXPECT_NE(help.output.find(key), std::string::npos) << key;
  }
  ::tessera::testing::TempDir dir;
  const std::string path = dir.Write("bad-scheduler.yaml", "defaults:\n  cores: 150\n");
  BinaryRun bad = RunBinary("--config " + path);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("invalid configuration"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("cores"), std::string::npos) << bad.output;
  BinaryRun unknown = RunBinary("--set server.prot=1");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("server.prot"), std::string::npos) << unknown.output;
  BinaryRun missing = RunBinary("--config /nonexistent/tessera.yaml");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("/nonexistent/tessera.yaml"), std::string::npos) << missing.output;
}

TEST(SchedulerBinaryTest, WebhookTlsFilesThatCannotBeReadStopTheStartWithExitCodeOne) {
  // The API server is never reached: the listeners come first.
  const int port = FreePort(), webhook_port = FreePort();
  ASSERT_GT(port, 0);
  BinaryRun run =
      RunBinary("--api-server http://127.0.0.1:9 --leader-elect false --port " + std::to_string(port) +
                " --webhook-port " + std::to_string(webhook_port == port ? port + 1 : webhook_port) +
                " --tls-cert-file /nonexistent/tls.crt --tls-key-file /nonexistent/tls.key");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("server.tlsCertFile /nonexistent/tls.crt: cannot read it"), std::string::npos)
      << run.output;
}

}  // namespace
}  // namespace tessera::scheduler::it
