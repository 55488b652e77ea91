// Certificates rotated without a restart: the tessera-scheduler binary serves
// its webhook over TLS from two PEM files; when they are replaced (renamed
// over, as a Secret volume or cert-manager replaces them) the next TLS client
// is shown the new certificate, by the same process. A replacement that cannot
// be used (not PEM, or a key that does not match) leaves the last good
// certificate in service. docs/security.md, "Certificate rotation".
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "apiserver/fake_apiserver.h"
#include "base/testing.h"
#include "security_fixture.h"
#include "testing/ports.h"
#include "testing/process.h"

namespace tessera::security {
namespace {

using ::tessera::testing::WaitFor;

// The common name of the certificate the server on 127.0.0.1:`port` presents,
// or "" when no TLS handshake completed. Verifies nothing: it only looks.
std::string PresentedCommonName(int port) {
  const int fd = ::tessera::testing::ConnectToLoopback(port);
  if (fd < 0) return "";
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  std::string name;
  if (SSL_connect(ssl) == 1) {
    if (X509* cert = SSL_get1_peer_certificate(ssl)) {
      char buffer[256] = {};
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buffer, sizeof buffer);
      name = buffer;
      X509_free(cert);
    }
    SSL_shutdown(ssl);
  } else {
    char text[256] = {};
    ERR_error_string_n(ERR_peek_last_error(), text, sizeof text);
    std::fprintf(stderr, "TLS handshake with 127.0.0.1:%d failed: %s\n", port, text);
  }
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ::close(fd);
  return name;
}

class CertificateRotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    for (const char* name : {"first", "second", "third"}) {
      ASSERT_TRUE(MakeSelfSigned(dir_.Path(name), name)) << "openssl could not make a certificate";
    }
    // The files the scheduler reads, as a Secret volume holds them.
    Install("first");
  }

  // Replaces tls.crt and tls.key by those of `name`, each renamed over the old one.
  void Install(const std::string& name, bool key_too = true) {
    for (const char* part : {"tls.crt", "tls.key"}) {
      if (std::string(part) == "tls.key" && !key_too) continue;
      std::filesystem::copy_file(dir_.Path(name) + "." + part, dir_.Path("new"),
                                 std::filesystem::copy_options::overwrite_existing);
      std::filesystem::rename(dir_.Path("new"), dir_.Path(part));
    }
  }

  ::tessera::testing::TempDir dir_{"tessera-rotation"};
  ::tessera::testing::FakeApiServer api_;
  const int webhook_port_ = ::tessera::testing::FreePort();
};

TEST_F(CertificateRotationTest, ANewCertificateIsServedWithoutARestart) {
  SchedulerProcess scheduler(dir_.Path("scheduler.log"));
  ASSERT_TRUE(
      scheduler.Start({"--api-server=" + api_.url(), "--webhook-port=" + std::to_string(webhook_port_),
                       "--tls-cert-file=" + dir_.Path("tls.crt"), "--tls-key-file=" + dir_.Path("tls.key")}))
      << scheduler.Log();
  const pid_t pid = scheduler.pid();
  // (/healthz answers once the extender port listens; the webhook's follows.)
  EXPECT_TRUE(WaitFor([&] { return PresentedCommonName(webhook_port_) == "first"; })) << scheduler.Log();

  Install("second");
  EXPECT_TRUE(WaitFor([&] { return PresentedCommonName(webhook_port_) == "second"; })) << scheduler.Log();
  EXPECT_EQ(scheduler.pid(), pid);
  EXPECT_EQ(::kill(pid, 0), 0) << "the scheduler is gone";

  // A certificate whose key is still the old one: not taken, "second" stays.
  Install("third", /*key_too=*/false);
  EXPECT_EQ(PresentedCommonName(webhook_port_), "second");
  // Not PEM at all: the same.
  std::ofstream(dir_.Path("tls.key")) << "not a key\n";
  EXPECT_EQ(PresentedCommonName(webhook_port_), "second");
  EXPECT_NE(scheduler.Log().find("cannot be used"), std::string::npos) << scheduler.Log();
  // Its key arrives: the pair is whole again and "third" is served.
  Install("third");
  EXPECT_TRUE(WaitFor([&] { return PresentedCommonName(webhook_port_) == "third"; })) << scheduler.Log();
  EXPECT_EQ(::kill(pid, 0), 0) << "the scheduler is gone";
}

}  // namespace
}  // namespace tessera::security
