// The tessera-scheduler binary's start-up contract, and the webhook over TLS.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "fixture.h"

namespace tessera::scheduler::it {
namespace {

struct BinaryRun {
  int exit_code = -1;
  std::string output;
};

BinaryRun RunBinary(const std::string& args) {
  BinaryRun r;
  std::string cmd = std::string(TESSERA_SCHEDULER_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(SchedulerBinaryTest, HelpListsEveryKeyAndBadConfigExitsWithTwo) {
  BinaryRun help = RunBinary("--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* key : {"schedulerName", "resources.gpuCount", "defaults.memoryMiB", "policy.gpu",
                          "reservationTimeoutSeconds", "server.tlsCertFile", "kube.timeoutSeconds",
                          "leaderElection.renewDeadlineSeconds", "logLevel"}) {
    EXPECT_NE(help.output.find(key), std::string::npos) << key;
  }
  std::string path = ::testing::TempDir() + "/bad-scheduler.yaml";
  std::ofstream(path) << "defaults:\n  cores: 150\n";
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

TEST_F(SchedulerIntegrationTest, WebhookServesAdmissionReviewsOverTls) {
  const std::string dir = ::testing::TempDir();
  const std::string cert = dir + "/sched-webhook.crt", key = dir + "/sched-webhook.key";
  std::string gen = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=tessera-scheduler -keyout " +
                    key + " -out " + cert + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(gen.c_str()), 0);
  SchedulerConfig config = Config();
  // Any free port: bind to 0 is not offered for the webhook listener, so probe one.
  httplib::Server probe;
  int webhook_port = probe.bind_to_any_port("127.0.0.1");
  probe.stop();
  ASSERT_GT(webhook_port, 0);
  config.webhook_port = webhook_port;
  config.tls_cert_file = cert;
  config.tls_key_file = key;
  scheduler_ = StartScheduler(config);
  httplib::SSLClient https("127.0.0.1", webhook_port);
  https.enable_server_certificate_verification(false);
  Json review = {
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request", {{"uid", "tls-1"}, {"object", scheduler::testing::GpuPod("default", "p", 1, 1000, 10)}}}};
  std::optional<httplib::Response> answer;
  ASSERT_TRUE(WaitFor([&] {
    auto r = https.Post("/mutate", review.dump(), "application/json");
    if (r) answer = *r;
    return answer.has_value();
  }));
  EXPECT_EQ(answer->status, 200);
  Json body = Json::parse(answer->body);
  EXPECT_EQ(body["response"]["uid"], "tls-1");
  EXPECT_EQ(body["response"]["allowed"], true);
  EXPECT_EQ(body["response"]["patchType"], "JSONPatch");
  // The webhook listener serves only the webhook and health.
  auto filter = https.Post("/filter", "{}", "application/json");
  ASSERT_TRUE(filter);
  EXPECT_EQ(filter->status, 404);
}

}  // namespace
}  // namespace tessera::scheduler::it
