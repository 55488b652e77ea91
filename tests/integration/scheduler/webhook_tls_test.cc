// The webhook over TLS, as the API server calls it: a throwaway CA and a
// serving certificate made with openssl, the scheduler's HTTPS listener, and a
// client that verifies the server against that CA. Also: TLS files that
// cannot be loaded stop Start() with a message naming them, a client that
// connects and never speaks does not hold Stop() up for good, and Stop() right
// after Start() returns (it used to hang when the accept loop had not started).
//
// Nothing here waits without a bound: every client has connection and read
// timeouts, and Stop() runs under a watchdog that ends the test binary with a
// message instead of hanging (the limit is generous; it detects a hang, it
// does not measure speed).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>

#include "fixture.h"
#include "testing/ports.h"

namespace tessera::scheduler::it {
namespace {

using ::tessera::scheduler::testing::ReturnsOrAbort;

bool Run(const std::string& command) {
  // `timeout` bounds every openssl call.
  return std::system(("timeout 60 " + command + " >/dev/null 2>&1").c_str()) == 0;
}

// A CA and a serving certificate for 127.0.0.1 signed by it, in a fresh
// directory removed afterwards.
struct TlsFiles {
  TlsFiles() {
    ca = dir + "/ca.crt";
    cert = dir + "/tls.crt";
    key = dir + "/tls.key";
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::ofstream(dir + "/server.ext")
        << "basicConstraints=CA:FALSE\n"
           "keyUsage=critical,digitalSignature\n"
           "extendedKeyUsage=serverAuth\n"
           "subjectAltName=DNS:tessera-scheduler.kube-system.svc,IP:127.0.0.1\n";
    ok =
        Run("openssl req -x509" + ec + " -days 1 -subj /CN=tessera-test-ca -keyout " + dir + "/ca.key -out " +
            ca + " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign") &&
        Run("openssl req -new" + ec + " -subj /CN=tessera-scheduler.kube-system.svc -keyout " + key +
            " -out " + dir + "/server.csr") &&
        Run("openssl x509 -req -days 1 -in " + dir + "/server.csr -CA " + ca + " -CAkey " + dir +
            "/ca.key -CAcreateserial -extfile " + dir + "/server.ext -out " + cert);
  }
  ::tessera::testing::TempDir tmp{"tessera-tls"};
  const std::string dir = tmp.path();
  std::string ca, cert, key;
  bool ok = false;
};

using ::tessera::testing::NothingListensOn;

// A TCP connection to `port` that never sends a byte (no TLS ClientHello).
int SilentConnection(int port) {
  return ::tessera::testing::ConnectToLoopback(port);
}

std::string Base64Decode(const std::string& text) {
  static const std::string kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    const size_t v = kAlphabet.find(c);
    if (v == std::string::npos) continue;  // padding
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xff));
    }
  }
  return out;
}

std::unique_ptr<httplib::SSLClient> HttpsClient(int port, const std::string& ca) {
  auto client = std::make_unique<httplib::SSLClient>("127.0.0.1", port);
  client->set_ca_cert_path(ca.c_str());
  client->enable_server_certificate_verification(true);
  client->set_connection_timeout(5);
  client->set_read_timeout(30);
  client->set_write_timeout(30);
  return client;
}

class WebhookTlsTest : public SchedulerIntegrationTest {
 protected:
  SchedulerConfig TlsConfig(const TlsFiles& files, int webhook_port) const {
    SchedulerConfig config = Config();
    config.webhook_port = webhook_port;
    config.tls_cert_file = files.cert;
    config.tls_key_file = files.key;
    return config;
  }

  void StopScheduler() {
    ReturnsOrAbort([this] { scheduler_.reset(); }, "Scheduler::Stop");
  }
};

TEST_F(WebhookTlsTest, ServesAdmissionReviewsToAClientVerifyingTheCertificate) {
  TlsFiles files;
  ASSERT_TRUE(files.ok) << "openssl could not make the test certificates in " << files.dir;
  const int webhook_port = FreePort();
  ASSERT_GT(webhook_port, 0);
  scheduler_ = StartScheduler(TlsConfig(files, webhook_port));
  ASSERT_EQ(scheduler_->webhook_port(), webhook_port);
  // A connection that never starts its handshake, held across the test and
  // Stop(): it must neither block the API server's calls nor Stop() for good.
  const int silent = SilentConnection(webhook_port);
  EXPECT_GE(silent, 0);

  auto https = HttpsClient(webhook_port, files.ca);
  Json pod = scheduler::testing::GpuPod("default", "p", 1, 1000, 10);
  pod["spec"].erase("schedulerName");
  Json review = {{"apiVersion", "admission.k8s.io/v1"},
                 {"kind", "AdmissionReview"},
                 {"request", {{"uid", "tls-1"}, {"object", pod}}}};
  auto answer = https->Post("/mutate", review.dump(), "application/json");
  ASSERT_TRUE(answer) << "no answer over TLS: " << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 200);
  Json body = Json::parse(answer->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << answer->body;
  EXPECT_EQ(body["kind"], "AdmissionReview");
  EXPECT_EQ(body["response"]["uid"], "tls-1");
  EXPECT_EQ(body["response"]["allowed"], true);
  EXPECT_EQ(body["response"]["patchType"], "JSONPatch");
  Json patch = Json::parse(Base64Decode(body["response"].value("patch", "")), nullptr, false);
  ASSERT_TRUE(patch.is_array()) << body.dump();
  bool scheduler_name = false, allocation_env = false;
  for (const Json& op : patch) {
    if (op.value("path", "") == "/spec/schedulerName" && op.value("value", Json()) == "tessera-scheduler") {
      scheduler_name = true;
    }
    if (op.value("path", "").starts_with("/spec/containers/0/env") &&
        op.dump().find(core::kAllocationEnvVar) != std::string::npos) {
      allocation_env = true;
    }
  }
  EXPECT_TRUE(scheduler_name) << patch.dump();
  EXPECT_TRUE(allocation_env) << patch.dump();

  // The listener serves the webhook and health only.
  auto filter = https->Post("/filter", "{}", "application/json");
  ASSERT_TRUE(filter) << httplib::to_string(filter.error());
  EXPECT_EQ(filter->status, 404);
  auto health = https->Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);

  // The certificate is what is checked: a client trusting another CA refuses it.
  TlsFiles other;
  ASSERT_TRUE(other.ok);
  auto stranger = HttpsClient(webhook_port, other.ca);
  auto refused = stranger->Post("/mutate", review.dump(), "application/json");
  EXPECT_FALSE(refused);
  EXPECT_EQ(refused.error(), httplib::Error::SSLServerVerification) << httplib::to_string(refused.error());
  // Plain HTTP gets no answer from the TLS listener.
  httplib::Client plain("127.0.0.1", webhook_port);
  plain.set_connection_timeout(5);
  plain.set_read_timeout(10);
  auto unanswered = plain.Post("/mutate", review.dump(), "application/json");
  EXPECT_FALSE(unanswered && unanswered->status == 200);

  StopScheduler();
  if (silent >= 0) close(silent);
  EXPECT_TRUE(NothingListensOn(webhook_port));
}

TEST_F(WebhookTlsTest, TlsFilesThatCannotBeLoadedFailTheStartNamingThem) {
  TlsFiles files;
  ASSERT_TRUE(files.ok) << "openssl could not make the test certificates in " << files.dir;
  TlsFiles other;
  ASSERT_TRUE(other.ok);
  const std::string not_pem = files.dir + "/not-pem.txt";
  std::ofstream(not_pem) << "not a certificate\n";
  struct Case {
    std::string cert, key;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {files.dir + "/missing.crt",
       files.key,
       {"server.tlsCertFile " + files.dir + "/missing.crt", "cannot read"}},
      {files.cert,
       files.dir + "/missing.key",
       {"server.tlsKeyFile " + files.dir + "/missing.key", "cannot read"}},
      {not_pem, files.key, {not_pem, "not a PEM certificate"}},
      {files.cert, not_pem, {not_pem, "not a PEM certificate"}},
      {files.cert, other.key, {files.cert, other.key, "does not match"}},
  };
  for (const Case& c : cases) {
    SchedulerConfig config = TlsConfig(files, FreePort());
    config.tls_cert_file = c.cert;
    config.tls_key_file = c.key;
    auto scheduler = MakeScheduler(config);
    Status started = scheduler->Start();
    ASSERT_FALSE(started.ok()) << c.cert << " / " << c.key;
    for (const std::string& part : c.message) {
      EXPECT_NE(started.error().message.find(part), std::string::npos) << started.error().message;
    }
    // The plain listener bound before the TLS files were read is closed again.
    const int port = scheduler->port();
    ReturnsOrAbort([&] { scheduler.reset(); }, "Scheduler::Stop after a failed Start");
    if (port > 0) {
      EXPECT_TRUE(NothingListensOn(port)) << port;
    }
  }
}

TEST_F(WebhookTlsTest, StopRightAfterStartReturns) {
  TlsFiles files;
  ASSERT_TRUE(files.ok) << "openssl could not make the test certificates in " << files.dir;
  // No pause between Start() and Stop(): the accept loops have usually not
  // started yet, which made Stop() hang in its join.
  for (int i = 0; i < 20; ++i) {
    SchedulerConfig config = TlsConfig(files, FreePort());
    auto scheduler = MakeScheduler(config);
    Status started = scheduler->Start();
    ASSERT_TRUE(started.ok()) << started.error().message;
    const int ports[] = {scheduler->port(), scheduler->webhook_port()};
    ReturnsOrAbort([&] { scheduler->Stop(); }, "Scheduler::Stop right after Start");
    for (int port : ports) EXPECT_TRUE(NothingListensOn(port)) << port;
  }
}

}  // namespace
}  // namespace tessera::scheduler::it
