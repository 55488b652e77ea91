#include "certs/webhook_certificate.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace tessera::certs {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kNames = ServiceDnsNames("tessera-scheduler", "kube-system");

Clock::Wall Now() {
  return std::chrono::system_clock::from_time_t(1893456000);  // 2030-01-01T00:00:00Z
}

WebhookCertificate Generate(std::chrono::hours validity = 24h * 365,
                            const std::vector<std::string>& names = kNames) {
  CertificateOptions options;
  options.dns_names = names;
  options.validity = validity;
  options.now = Now();
  auto cert = GenerateWebhookCertificate(options);
  EXPECT_TRUE(cert.ok()) << cert.error().message;
  return cert.ok() ? *cert : WebhookCertificate{};
}

TEST(WebhookCertificateTest, ServiceDnsNamesStartWithTheOneTheApiServerUses) {
  EXPECT_EQ(kNames, (std::vector<std::string>{"tessera-scheduler.kube-system.svc",
                                              "tessera-scheduler.kube-system.svc.cluster.local",
                                              "tessera-scheduler.kube-system", "tessera-scheduler"}));
}

TEST(WebhookCertificateTest, ANewCertificateIsUsableForItsNames) {
  WebhookCertificate cert = Generate();
  EXPECT_NE(cert.ca_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_NE(cert.key_pem.find("BEGIN PRIVATE KEY"), std::string::npos);
  CertificateCheck check = CheckWebhookCertificate(cert, kNames, Now(), 24h * 30);
  EXPECT_TRUE(check.usable) << check.reason;
  EXPECT_EQ(check.not_after, Now() + 24h * 365);
}

TEST(WebhookCertificateTest, TheCaIsACaAndTheCertificateIsForServing) {
  WebhookCertificate cert = Generate();
  BIO* bio = BIO_new_mem_buf(cert.ca_pem.data(), static_cast<int>(cert.ca_pem.size()));
  X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(ca, nullptr);
  EXPECT_EQ(X509_check_ca(ca), 1);
  bio = BIO_new_mem_buf(cert.cert_pem.data(), static_cast<int>(cert.cert_pem.size()));
  X509* leaf = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ASSERT_NE(leaf, nullptr);
  EXPECT_EQ(X509_check_ca(leaf), 0);
  EXPECT_EQ(X509_check_purpose(leaf, X509_PURPOSE_SSL_SERVER, 0), 1);
  X509_free(ca);
  X509_free(leaf);
}

TEST(WebhookCertificateTest, ACertificateExpiringWithinTheWindowIsNotUsable) {
  WebhookCertificate cert = Generate(24h * 20);
  CertificateCheck check = CheckWebhookCertificate(cert, kNames, Now(), 24h * 30);
  EXPECT_FALSE(check.usable);
  EXPECT_NE(check.reason.find("expires"), std::string::npos) << check.reason;
  EXPECT_TRUE(CheckWebhookCertificate(cert, kNames, Now(), 24h * 10).usable);
  EXPECT_FALSE(CheckWebhookCertificate(cert, kNames, Now() + 24h * 21, 24h).usable) << "expired";
}

TEST(WebhookCertificateTest, OtherNamesAMismatchedKeyOrAForeignCaAreNotUsable) {
  WebhookCertificate cert = Generate(24h * 365, {"other.kube-system.svc"});
  CertificateCheck check = CheckWebhookCertificate(cert, kNames, Now(), 24h);
  EXPECT_FALSE(check.usable);
  EXPECT_NE(check.reason.find("not issued for tessera-scheduler.kube-system.svc"), std::string::npos)
      << check.reason;

  WebhookCertificate a = Generate();
  WebhookCertificate b = Generate();
  WebhookCertificate mixed = a;
  mixed.key_pem = b.key_pem;
  EXPECT_EQ(CheckWebhookCertificate(mixed, kNames, Now(), 24h).reason, "tls.key is not the key of tls.crt");
  mixed = a;
  mixed.ca_pem = b.ca_pem;
  EXPECT_EQ(CheckWebhookCertificate(mixed, kNames, Now(), 24h).reason, "tls.crt is not signed by ca.crt");
  mixed = a;
  mixed.cert_pem = "-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n";
  EXPECT_EQ(CheckWebhookCertificate(mixed, kNames, Now(), 24h).reason, "tls.crt is not a PEM certificate");
}

TEST(WebhookCertificateTest, BadOptionsAreRefused) {
  CertificateOptions options;
  EXPECT_FALSE(GenerateWebhookCertificate(options).ok());
  options.dns_names = {"a b"};
  EXPECT_FALSE(GenerateWebhookCertificate(options).ok());
}

TEST(WebhookCertificateTest, CertificateValidAtFollowsTheValidity) {
  WebhookCertificate cert = Generate(24h * 2);
  EXPECT_TRUE(CertificateValidAt(cert.ca_pem, Now()));
  EXPECT_FALSE(CertificateValidAt(cert.ca_pem, Now() + 24h * 3));
  EXPECT_FALSE(CertificateValidAt("not a certificate", Now()));
}

TEST(WebhookCertificateTest, Base64RoundTrips) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    auto decoded = Base64Decode(Base64Encode(s));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, s);
  }
  EXPECT_EQ(Base64Encode("abcd"), "YWJjZA==");
  EXPECT_FALSE(Base64Decode("abc").ok());
  EXPECT_FALSE(Base64Decode("a!c=").ok());
}

}  // namespace
}  // namespace tessera::certs
