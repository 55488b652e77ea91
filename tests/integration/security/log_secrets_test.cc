// No token or certificate in any log line: tessera-scheduler and tessera-node
// run at --log-level=debug with a service-account token file (through a
// kubeconfig's tokenFile, as in a pod) and, for the scheduler, a TLS
// certificate and key; once they have talked to the API server (and, for a
// token the server refuses, failed to), their logs are searched for the token
// and for every line of the PEM bodies. docs/security.md, "Secrets in logs".
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "apiserver/fake_apiserver.h"
#include "base/testing.h"
#include "security_fixture.h"
#include "testing/node_cluster.h"

namespace tessera::security {
namespace {

using ::tessera::testing::WaitFor;

std::string RandomSecret(const std::string& prefix) {
  std::random_device random;
  std::ostringstream out;
  out << prefix << std::hex;
  for (int i = 0; i < 4; ++i) out << random();
  return out.str();
}

// A kubeconfig for `server` whose user reads its token from `token_file`.
void WriteKubeconfig(const std::string& path, const std::string& server, const std::string& token_file) {
  std::ofstream(path) << "apiVersion: v1\nkind: Config\n"
                      << "clusters: [{name: c, cluster: {server: \"" << server << "\"}}]\n"
                      << "users: [{name: u, user: {tokenFile: \"" << token_file << "\"}}]\n"
                      << "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n";
}

// The secret strings of a PEM file: each base64 line between its BEGIN and END lines.
std::vector<std::string> PemBodyLines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(::tessera::testing::ReadFileOrEmpty(path));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("-----", 0) != 0 && line.size() >= 16) lines.push_back(line);
  }
  return lines;
}

// What of `secrets` appears in `log` (the secrets themselves are not repeated
// in the failure message: only their index and what they are).
void ExpectNoneIn(const std::string& log, const std::vector<std::pair<std::string, std::string>>& secrets) {
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log.find("log_level=debug"), std::string::npos) << "not started at --log-level=debug\n" << log;
  for (const auto& [what, secret] : secrets) {
    ASSERT_FALSE(secret.empty());
    EXPECT_EQ(log.find(secret), std::string::npos) << what << " appears in the log";
  }
  EXPECT_EQ(log.find("PRIVATE KEY"), std::string::npos) << "a PEM private key header appears in the log";
  EXPECT_EQ(log.find("BEGIN CERTIFICATE"), std::string::npos) << "a PEM certificate appears in the log";
}

TEST(LogSecretsTest, TheSchedulerLogsNeitherItsTokenNorItsCertificate) {
  ::tessera::testing::TempDir dir("tessera-secrets");
  const std::string token = RandomSecret("tessera-token-");
  ::tessera::testing::FakeApiServerOptions options;
  options.bearer_token = token;
  ::tessera::testing::FakeApiServer api(options);
  ASSERT_TRUE(api.Start().ok());
  ASSERT_TRUE(MakeSelfSigned(dir.Path("webhook"), "tessera-scheduler"));
  std::ofstream(dir.Path("token")) << token;
  WriteKubeconfig(dir.Path("kubeconfig"), api.url(), dir.Path("token"));
  const std::string wrong = RandomSecret("tessera-refused-token-");
  std::ofstream(dir.Path("wrong-token")) << wrong;
  WriteKubeconfig(dir.Path("wrong-kubeconfig"), api.url(), dir.Path("wrong-token"));
  const std::vector<std::string> tls = {"--webhook-port=" + std::to_string(::tessera::testing::FreePort()),
                                        "--tls-cert-file=" + dir.Path("webhook.tls.crt"),
                                        "--tls-key-file=" + dir.Path("webhook.tls.key"), "--log-level=debug"};

  {
    SchedulerProcess scheduler(dir.Path("scheduler.log"));
    std::vector<std::string> flags = tls;
    flags.push_back("--kubeconfig=" + dir.Path("kubeconfig"));
    ASSERT_TRUE(scheduler.Start(flags)) << scheduler.Log();
    // It has listed with the token (200) before it is looked at.
    EXPECT_TRUE(WaitFor([&] {
      for (const auto& r : api.Requests()) {
        if (r.path == "/api/v1/nodes" && r.status == 200) return true;
      }
      return false;
    }));
    // Ready (until then filter refuses without a debug line), then a
    // scheduling request: the extender's debug lines.
    EXPECT_TRUE(WaitFor([&] { return scheduler.Log().find("view complete") != std::string::npos; }))
        << scheduler.Log();
    httplib::Client http("127.0.0.1", scheduler.port());
    http.set_read_timeout(10);
    const std::string pod =
        R"({"metadata":{"name":"p","namespace":"default","uid":"u"},"spec":{"containers":[{"name":"c",)"
        R"("resources":{"limits":{"nvidia.com/gpu":"1"}}}]}})";
    auto filter = http.Post("/filter", R"({"Pod":)" + pod + R"(,"NodeNames":["n"]})", "application/json");
    EXPECT_TRUE(filter) << "no answer to /filter";
    EXPECT_TRUE(WaitFor([&] { return scheduler.Log().find("[debug]") != std::string::npos; }))
        << scheduler.Log();
  }
  {
    // A token the server refuses: the failures are logged, the token is not.
    SchedulerProcess refused(dir.Path("refused.log"));
    std::vector<std::string> flags = tls;
    flags[0] = "--webhook-port=" + std::to_string(::tessera::testing::FreePort());
    flags.push_back("--kubeconfig=" + dir.Path("wrong-kubeconfig"));
    refused.Start(flags);  // may not get ready without the API: not asked
    EXPECT_TRUE(WaitFor([&] {
      for (const auto& r : api.Requests()) {
        if (r.status == 401) return true;
      }
      return false;
    }));
    EXPECT_TRUE(WaitFor([&] { return refused.Log().find("401") != std::string::npos; })) << refused.Log();
  }
  std::vector<std::pair<std::string, std::string>> secrets = {{"the token", token},
                                                              {"the refused token", wrong}};
  for (const std::string file : {"webhook.tls.key", "webhook.tls.crt"}) {
    for (const std::string& line : PemBodyLines(dir.Path(file)))
      secrets.push_back({"a line of " + file, line});
  }
  ASSERT_GT(secrets.size(), 4u);
  ExpectNoneIn(::tessera::testing::ReadFileOrEmpty(dir.Path("scheduler.log")), secrets);
  ExpectNoneIn(::tessera::testing::ReadFileOrEmpty(dir.Path("refused.log")), secrets);
}

TEST(LogSecretsTest, TheNodeAgentDoesNotLogItsToken) {
  ::tessera::testing::NodeCluster cluster;
  auto gpus = cluster.Start();
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  const std::string token = RandomSecret("tessera-node-token-");
  std::ofstream(cluster.Path("token")) << token;
  WriteKubeconfig(cluster.Path("kubeconfig"), cluster.api().url(), cluster.Path("token"));
  ASSERT_TRUE(
      cluster.StartNode({{"--kubeconfig", cluster.Path("kubeconfig")}, {"--log-level", "debug"}}).ok());
  // It has published its inventory, with the token, before it is looked at.
  EXPECT_TRUE(WaitFor([&] { return cluster.PublishedInventory().has_value(); })) << cluster.NodeLog();
  bool sent = false;
  for (const auto& r : cluster.api().Requests()) sent = sent || r.method == "PATCH";
  EXPECT_TRUE(sent);
  cluster.StopNode();
  ExpectNoneIn(cluster.NodeLog(), {{"the token", token}});
}

}  // namespace
}  // namespace tessera::security
