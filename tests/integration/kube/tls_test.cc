// HTTPS to the stand-in: server CA from a file or PEM data, client
// certificates from files or data, insecure-skip-tls-verify, and a kubeconfig
// carrying all of it. Keys and certificates are generated here with the
// openssl command; nothing is committed.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fixture.h"
#include "kube/config.h"

namespace tessera::kube::it {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& p) {
  return ::tessera::testing::ReadFileOrEmpty(p.string());
}

class TlsIT : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new ::tessera::testing::TempDir("tessera-kube-tls");
    dir_ = new fs::path(tmp_->path());
    const std::string d = dir_->string();
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string script =
        "cd " + d + " && " + "openssl req -x509 " + key +
        " -keyout ca.key -out ca.crt -days 2 -subj /CN=tessera-test-ca && " + "openssl req " + key +
        " -keyout server.key -out server.csr -subj /CN=127.0.0.1 && " +
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext && " +
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 "
        "-extfile server.ext && " +
        "openssl req " + key + " -keyout client.key -out client.csr -subj /CN=tessera-client && " +
        "printf 'extendedKeyUsage=clientAuth\\n' > client.ext && " +
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2 "
        "-extfile client.ext && " +
        "for f in ca.crt client.crt client.key; do openssl base64 -A -in $f -out $f.b64; done";
    generated_ = std::system((script + " > openssl.log 2>&1").c_str()) == 0;
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete tmp_;
  }

  void SetUp() override { ASSERT_TRUE(generated_) << "openssl failed; see " << (*dir_ / "openssl.log"); }

  std::unique_ptr<testing::FakeApiServer> StartServer(bool require_client_cert) {
    testing::FakeApiServerOptions o;
    o.keep_alive_seconds = 1;
    o.tls_cert_file = (*dir_ / "server.crt").string();
    o.tls_key_file = (*dir_ / "server.key").string();
    if (require_client_cert) o.client_ca_file = (*dir_ / "ca.crt").string();
    auto server = std::make_unique<testing::FakeApiServer>(o);
    auto st = server->Start();
    EXPECT_TRUE(st.ok()) << st.error().message;
    EXPECT_EQ(server->url().rfind("https://", 0), 0u);
    return server;
  }

  static ApiResult<ObjectList> ListNodes(const std::string& url, const TlsConfig& tls) {
    CurlTransportOptions t;
    t.server = url;
    t.tls = tls;
    ClientOptions o;
    o.qps = 0;
    o.timeout = std::chrono::milliseconds(10000);
    Client client(std::make_shared<CurlTransport>(t), o);
    return client.List(resources::kNodes, "");
  }

  static ::tessera::testing::TempDir* tmp_;
  static fs::path* dir_;
  static bool generated_;
};

::tessera::testing::TempDir* TlsIT::tmp_ = nullptr;
fs::path* TlsIT::dir_ = nullptr;
bool TlsIT::generated_ = false;

TEST_F(TlsIT, ServerCaFromFileOrDataOrInsecure) {
  auto server = StartServer(false);
  TlsConfig by_file;
  by_file.ca_file = (*dir_ / "ca.crt").string();
  auto a = ListNodes(server->url(), by_file);
  EXPECT_TRUE(a.ok()) << a.error().message;

  TlsConfig by_data;
  by_data.ca_data = Slurp(*dir_ / "ca.crt");
  auto b = ListNodes(server->url(), by_data);
  EXPECT_TRUE(b.ok()) << b.error().message;

  TlsConfig untrusted;  // system CAs do not know our test CA
  auto c = ListNodes(server->url(), untrusted);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.error().IsTransport());
  EXPECT_NE(c.error().message.find("certificate"), std::string::npos) << c.error().message;

  TlsConfig insecure;
  insecure.insecure_skip_verify = true;
  auto d = ListNodes(server->url(), insecure);
  EXPECT_TRUE(d.ok()) << d.error().message;
  server->Stop();
}

TEST_F(TlsIT, ClientCertificateFromFileOrData) {
  auto server = StartServer(true);
  TlsConfig no_cert;
  no_cert.ca_file = (*dir_ / "ca.crt").string();
  auto refused = ListNodes(server->url(), no_cert);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.error().IsTransport());

  TlsConfig files = no_cert;
  files.cert_file = (*dir_ / "client.crt").string();
  files.key_file = (*dir_ / "client.key").string();
  auto a = ListNodes(server->url(), files);
  EXPECT_TRUE(a.ok()) << a.error().message;

  TlsConfig data = no_cert;
  data.cert_data = Slurp(*dir_ / "client.crt");
  data.key_data = Slurp(*dir_ / "client.key");
  auto b = ListNodes(server->url(), data);
  EXPECT_TRUE(b.ok()) << b.error().message;
  server->Stop();
}

TEST_F(TlsIT, KubeconfigWithInlineCredentialsEndToEnd) {
  auto server = StartServer(true);
  const fs::path path = *dir_ / "kubeconfig";
  std::ofstream(path) << "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                      << "contexts: [{name: test, context: {cluster: c, user: u, namespace: tessera}}]\n"
                      << "clusters: [{name: c, cluster: {server: '" << server->url()
                      << "', certificate-authority-data: " << Slurp(*dir_ / "ca.crt.b64") << "}}]\n"
                      << "users: [{name: u, user: {client-certificate-data: "
                      << Slurp(*dir_ / "client.crt.b64")
                      << ", client-key-data: " << Slurp(*dir_ / "client.key.b64") << "}}]\n";
  ResolveOptions ro;
  ro.kubeconfig = path.string();
  auto config = ResolveConfig(ro);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->namespace_, "tessera");
  ClientOptions o;
  o.qps = 0;
  auto client = MakeClient(*config, o);
  NodesApi nodes(client.get());
  auto created = nodes.Create(Node("n1"));
  ASSERT_TRUE(created.ok()) << created.error().message;
  EXPECT_TRUE(nodes.Get("n1").ok());
  server->Stop();
}

}  // namespace
}  // namespace tessera::kube::it
