// `tessera webhook-certs`, the binary deploy/scheduler runs as an init container,
// against the API-server stand-in: it creates the Secret and sets caBundle, keeps
// a valid certificate (idempotent), renews one that expires soon or is corrupt
// (keeping the old CA trusted beside the new one), survives a write conflict, and
// refuses to start without the webhook configuration or an API server. What it
// writes is checked by openssl itself (`openssl verify` with the Service's name).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "apiserver/fake_apiserver.h"
#include "certs/webhook_certificate.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct CommandRun {
  int exit_code = -1;
  std::string output;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Decode(const Json& value) {
  auto decoded = certs::Base64Decode(value.get<std::string>());
  EXPECT_TRUE(decoded.ok());
  return decoded.ok() ? *decoded : "";
}

class WebhookCertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/twc-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    testing::FakeApiServerOptions options;
    options.keep_alive_seconds = 1;
    api_ = std::make_unique<testing::FakeApiServer>(options);
    ASSERT_TRUE(api_->Start().ok());
  }
  void TearDown() override {
    api_->Stop();
    fs::remove_all(dir_);
  }

  // What deploy/scheduler/webhook.yaml creates: two webhooks, no caBundle yet.
  void CreateWebhookConfiguration() {
    Json hook = {
        {"name", "mutate.tessera.io"},
        {"admissionReviewVersions", {"v1"}},
        {"sideEffects", "None"},
        {"clientConfig",
         {{"service", {{"name", "tessera-scheduler"}, {"namespace", "kube-system"}, {"path", "/mutate"}}}}}};
    Json second = hook;
    second["name"] = "mutate-again.tessera.io";
    Json config = {{"metadata", {{"name", "tessera-scheduler"}}}, {"webhooks", {hook, second}}};
    ASSERT_TRUE(api_->CreateObject("mutatingwebhookconfigurations", config).ok());
  }

  CommandRun Certs(const std::string& flags = "") {
    const std::string command = std::string(TESSERA_CLI_BINARY) + " webhook-certs --api-server " +
                                api_->url() + " --write-dir " + dir_ + "/tls " + flags + " 2>&1";
    CommandRun run;
    FILE* pipe = ::popen(command.c_str(), "r");
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) run.output.append(buffer, n);
    const int status = ::pclose(pipe);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return run;
  }

  std::optional<Json> Secret() { return api_->GetObject("secrets", "kube-system", "tessera-scheduler-tls"); }
  Json Webhooks() {
    return api_->GetObject("mutatingwebhookconfigurations", "", "tessera-scheduler")->at("webhooks");
  }

  // openssl's own verdict on the files written: chain and the name the API server dials.
  int OpensslVerify() {
    const std::string command = "openssl verify -CAfile " + dir_ + "/tls/ca.crt -verify_hostname " +
                                "tessera-scheduler.kube-system.svc " + dir_ + "/tls/tls.crt >/dev/null 2>&1";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string dir_;
  std::unique_ptr<testing::FakeApiServer> api_;
};

TEST_F(WebhookCertsTest, CreatesTheSecretAndTrustsItsCaInEveryWebhook) {
  CreateWebhookConfiguration();
  CommandRun run = Certs();
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("certificate created"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("caBundle updated"), std::string::npos) << run.output;

  auto secret = Secret();
  ASSERT_TRUE(secret.has_value());
  EXPECT_EQ((*secret)["type"], "kubernetes.io/tls");
  const std::string ca = Decode((*secret)["data"]["ca.crt"]);
  EXPECT_EQ(Decode((*secret)["data"]["tls.crt"]), ReadFile(dir_ + "/tls/tls.crt"));
  EXPECT_EQ(Decode((*secret)["data"]["tls.key"]), ReadFile(dir_ + "/tls/tls.key"));
  EXPECT_EQ((fs::status(dir_ + "/tls/tls.key").permissions() & fs::perms::others_read), fs::perms::none);
  for (const Json& hook : Webhooks()) EXPECT_EQ(Decode(hook["clientConfig"]["caBundle"]), ca) << hook.dump();
  EXPECT_EQ(Webhooks()[0]["clientConfig"]["service"]["path"], "/mutate") << "the rest is left alone";
  EXPECT_EQ(OpensslVerify(), 0);
}

TEST_F(WebhookCertsTest, ASecondRunKeepsAValidCertificateAndChangesNothing) {
  CreateWebhookConfiguration();
  ASSERT_EQ(Certs().exit_code, 0);
  const std::string secret_version = (*Secret())["metadata"]["resourceVersion"];
  const uint64_t version = api_->CurrentResourceVersion();
  CommandRun run = Certs();
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("certificate reused"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("caBundle already trusts the CA"), std::string::npos) << run.output;
  EXPECT_EQ((*Secret())["metadata"]["resourceVersion"], secret_version);
  EXPECT_EQ(api_->CurrentResourceVersion(), version) << "no write at all";
  EXPECT_EQ(OpensslVerify(), 0);
}

TEST_F(WebhookCertsTest, ACertificateExpiringSoonIsRenewedAndTheOldCaStaysTrusted) {
  CreateWebhookConfiguration();
  ASSERT_EQ(Certs("--validity-days 20 --renew-before-days 10").exit_code, 0);
  const std::string old_ca = Decode((*Secret())["data"]["ca.crt"]);
  CommandRun run = Certs();  // renew within 30 days: 20 days left is too few
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("certificate renewed (tls.crt expires"), std::string::npos) << run.output;
  const std::string new_ca = Decode((*Secret())["data"]["ca.crt"]);
  EXPECT_NE(new_ca, old_ca);
  for (const Json& hook : Webhooks()) EXPECT_EQ(Decode(hook["clientConfig"]["caBundle"]), new_ca + old_ca);
  EXPECT_EQ(OpensslVerify(), 0);
  // And the renewed one is kept from then on.
  EXPECT_NE(Certs().output.find("certificate reused"), std::string::npos);
}

TEST_F(WebhookCertsTest, ACorruptSecretIsReplaced) {
  CreateWebhookConfiguration();
  Json secret = {
      {"metadata", {{"name", "tessera-scheduler-tls"}, {"namespace", "kube-system"}}},
      {"type", "kubernetes.io/tls"},
      {"data", {{"tls.crt", "bm90IGEgY2VydA=="}, {"tls.key", "bm9wZQ=="}, {"ca.crt", "bm9wZQ=="}}}};
  ASSERT_TRUE(api_->CreateObject("secrets", secret).ok());
  CommandRun run = Certs();
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("certificate renewed (ca.crt is not a PEM certificate)"), std::string::npos)
      << run.output;
  EXPECT_EQ(OpensslVerify(), 0);
  EXPECT_EQ(Decode(Webhooks()[0]["clientConfig"]["caBundle"]), Decode((*Secret())["data"]["ca.crt"]));
}

TEST_F(WebhookCertsTest, AWriteConflictIsResolvedByReadingAgain) {
  CreateWebhookConfiguration();
  ASSERT_EQ(Certs("--validity-days 20 --renew-before-days 10").exit_code, 0);
  testing::Fault conflict;
  conflict.method = "PUT";
  conflict.path_contains = "/secrets/";
  conflict.status = 409;
  conflict.times = 1;
  api_->AddFault(conflict);
  CommandRun run = Certs();
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("certificate renewed"), std::string::npos) << run.output;
  EXPECT_EQ(OpensslVerify(), 0);
}

TEST_F(WebhookCertsTest, WithoutTheWebhookConfigurationNothingIsWritten) {
  CommandRun run = Certs();
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("MutatingWebhookConfiguration tessera-scheduler does not exist"),
            std::string::npos)
      << run.output;
  EXPECT_FALSE(Secret().has_value());
  EXPECT_FALSE(fs::exists(dir_ + "/tls"));
}

TEST_F(WebhookCertsTest, BadFlagsAndADeadApiServerAreClearFailures) {
  CreateWebhookConfiguration();
  CommandRun run = Certs("--validity-days 10 --renew-before-days 30");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("renewal window must be shorter than the validity"), std::string::npos)
      << run.output;
  EXPECT_FALSE(Secret().has_value());
  api_->Stop();
  run = Certs();
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("cannot read MutatingWebhookConfiguration tessera-scheduler"), std::string::npos)
      << run.output;
}

}  // namespace
}  // namespace tessera
