#include "kube/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "base/testing.h"

namespace tessera::kube {
namespace {

namespace fs = std::filesystem;

class ConfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& rel, const std::string& text) { return tmp_.Write(rel, text); }

  ::tessera::testing::TempDir tmp_{"tessera-kube-config"};
  const fs::path dir_ = tmp_.path();
};

constexpr const char* kKubeconfig = R"(
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team-a}
- name: prod
  context: {cluster: c2, user: u2}
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: ca.pem
- name: c2
  cluster:
    server: https://prod.example:443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    insecure-skip-tls-verify: false
users:
- name: u1
  user:
    token: abc123
- name: u2
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
)";

TEST_F(ConfigTest, KubeconfigCurrentContextWithTokenAndRelativeCaFile) {
  Write("ca.pem", "pem");
  const std::string path = Write("config", kKubeconfig);
  auto c = LoadKubeconfigFile(path);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->token, "abc123");
  EXPECT_EQ(c->namespace_, "team-a");
  EXPECT_EQ(c->tls.ca_file, (dir_ / "ca.pem").string());
  EXPECT_FALSE(c->tls.insecure_skip_verify);
}

TEST_F(ConfigTest, KubeconfigExplicitContextWithInlineCertificates) {
  Write("ca.pem", "pem");
  auto c = LoadKubeconfigFile(Write("config", kKubeconfig), "prod");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->server, "https://prod.example:443");
  EXPECT_EQ(c->tls.ca_data, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(c->tls.cert_data, "cert");
  EXPECT_EQ(c->tls.key_data, "key");
  EXPECT_EQ(c->namespace_, "default");
  EXPECT_TRUE(c->token.empty());
}

TEST_F(ConfigTest, KubeconfigTokenFileAndInsecure) {
  Write("tok", "secret\n");
  auto c = ParseKubeconfig(R"(
current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://h:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {tokenFile: tok}}]
)",
                           dir_.string(), "test");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(c->tls.insecure_skip_verify);
  EXPECT_EQ(c->token_file, (dir_ / "tok").string());
  FileTokenSource source(c->token_file, std::chrono::seconds(60));
  EXPECT_EQ(source.Token(), "secret");
}

TEST_F(ConfigTest, BadKubeconfigsGiveErrorsNamingTheProblem) {
  struct Case {
    const char* yaml;
    const char* expect;
  };
  const Case cases[] = {
      {"{{{ not yaml", "not valid YAML"},
      {"- a\n- b\n", "expected a YAML mapping"},
      {"clusters: []\n", "no current-context"},
      {"current-context: nope\ncontexts: []\n", "context \"nope\" not found"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\nclusters: []\n",
       "cluster \"c\", which is not defined"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: "
       "{}}]\n",
       "has no server"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
       "clusters: [{name: c, cluster: {server: ftp://x}}]\n",
       "not an http(s) URL"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
       "clusters: [{name: c, cluster: {server: 'https://x', certificate-authority: missing.pem}}]\n",
       "missing.pem does not exist"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
       "clusters: [{name: c, cluster: {server: 'https://x', certificate-authority-data: '!!!'}}]\n",
       "not valid base64"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
       "clusters: [{name: c, cluster: {server: 'https://x', insecure-skip-tls-verify: yes}}]\n",
       "cluster \"c\" insecure-skip-tls-verify must be true or false, got 'yes'"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
       "clusters: [{name: c, cluster: {server: 'https://x'}}]\nusers: [{name: u, user: {client-key-data: "
       "a2V5}}]\n",
       "needs both a client certificate and a client key"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
       "clusters: [{name: c, cluster: {server: 'https://x'}}]\nusers: [{name: u, user: {exec: {command: "
       "aws}}}]\n",
       "exec/auth-provider"},
      {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
       "clusters: [{name: c, cluster: {server: 'https://x'}}]\nusers: []\n",
       "user \"u\", which is not defined"},
  };
  for (const Case& c : cases) {
    auto r = ParseKubeconfig(c.yaml, dir_.string(), "kubeconfig test");
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_NE(r.error().message.find(c.expect), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.rfind("kubeconfig test", 0), 0u) << r.error().message;
  }
  auto missing = LoadKubeconfigFile((dir_ / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("cannot read"), std::string::npos);
}

TEST_F(ConfigTest, InClusterReadsServiceAccountUnderRoot) {
  const std::string sa = "var/run/secrets/kubernetes.io/serviceaccount/";
  Write(sa + "token", "tok-1\n");
  Write(sa + "ca.crt", "pem");
  Write(sa + "namespace", "tessera-system");
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"}};
  InClusterOptions o;
  o.root = dir_.string();
  o.getenv = [&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto c = LoadInClusterConfig(o);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->namespace_, "tessera-system");
  EXPECT_EQ(c->tls.ca_file, (dir_ / (sa + "ca.crt")).string());
  EXPECT_EQ(c->token_file, (dir_ / (sa + "token")).string());

  // Resolution picks in-cluster when no kubeconfig is given.
  ResolveOptions ro;
  ro.in_cluster = o;
  auto resolved = ResolveConfig(ro);
  ASSERT_TRUE(resolved.ok()) << resolved.error().message;
  EXPECT_EQ(resolved->source, "in-cluster");

  // An explicit kubeconfig wins over in-cluster; KUBECONFIG too.
  Write("ca.pem", "pem");
  ro.kubeconfig = Write("config", kKubeconfig);
  EXPECT_EQ(ResolveConfig(ro)->server, "https://10.0.0.1:6443");
  ro.kubeconfig.clear();
  env["KUBECONFIG"] = (dir_ / "absent").string() + ":" + (dir_ / "config").string();
  ro.in_cluster = o;
  EXPECT_EQ(ResolveConfig(ro)->server, "https://10.0.0.1:6443");

  env.erase("KUBERNETES_SERVICE_HOST");
  env.erase("KUBECONFIG");
  auto outside = LoadInClusterConfig(o);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.error().message.find("KUBERNETES_SERVICE_HOST"), std::string::npos);
  auto nothing = ResolveConfig(ro);
  ASSERT_FALSE(nothing.ok());
  EXPECT_NE(nothing.error().message.find("no Kubernetes configuration"), std::string::npos);
}

TEST_F(ConfigTest, InClusterWithoutTokenIsAClearError) {
  InClusterOptions o;
  o.root = dir_.string();
  o.getenv = [](const char* k) -> const char* {
    return std::string(k) == "KUBERNETES_SERVICE_HOST"   ? "10.0.0.1"
           : std::string(k) == "KUBERNETES_SERVICE_PORT" ? "443"
                                                         : nullptr;
  };
  auto c = LoadInClusterConfig(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("service-account token"), std::string::npos) << c.error().message;
}

TEST_F(ConfigTest, TokenFileIsReReadAfterThePeriod) {
  const std::string path = Write("token", "first");
  FakeClock clock;
  FileTokenSource source(path, std::chrono::seconds(60), &clock);
  EXPECT_EQ(source.Token(), "first");
  Write("token", "second");  // the kubelet rotated the bound token
  clock.Advance(std::chrono::seconds(59));
  EXPECT_EQ(source.Token(), "first");
  clock.Advance(std::chrono::seconds(1));
  EXPECT_EQ(source.Token(), "second");
  fs::remove(path);  // a failed read keeps the last good token
  clock.Advance(std::chrono::seconds(60));
  EXPECT_EQ(source.Token(), "second");
}

}  // namespace
}  // namespace tessera::kube
