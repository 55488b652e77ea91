#include "certs/webhook_certificate.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <memory>

namespace tessera::certs {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using NamePtr = std::unique_ptr<X509_NAME, Deleter<X509_NAME, X509_NAME_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;

// The latest OpenSSL error, for messages.
std::string OpensslError(const std::string& what) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return what;
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return what + ": " + text;
}

Result<PkeyPtr> NewKey() {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return Error{OpensslError("cannot generate an EC P-256 key")};
  return key;
}

bool AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return false;
  const bool added = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return added;
}

// A certificate for `key`'s public half with `subject`, issued by `issuer`
// (itself when null), not signed yet.
Result<X509Ptr> NewCertificate(EVP_PKEY* key, const std::string& common_name,
                               const CertificateOptions& options) {
  X509Ptr cert(X509_new());
  if (!cert) return Error{OpensslError("X509_new")};
  X509_set_version(cert.get(), 2);  // v3
  BnPtr serial(BN_new());
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return Error{OpensslError("cannot make a serial number")};
  }
  const time_t now = std::chrono::system_clock::to_time_t(options.now);
  const time_t not_before = now - 3600;
  const time_t not_after = now + std::chrono::duration_cast<std::chrono::seconds>(options.validity).count();
  if (ASN1_TIME_set(X509_getm_notBefore(cert.get()), not_before) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert.get()), not_after) == nullptr) {
    return Error{OpensslError("cannot set the validity")};
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                                 0) != 1) {
    return Error{OpensslError("cannot set the common name " + common_name)};
  }
  if (X509_set_pubkey(cert.get(), key) != 1) return Error{OpensslError("X509_set_pubkey")};
  return cert;
}

Result<std::string> ToPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return Error{OpensslError("cannot write PEM")};
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

Result<std::string> ToPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Error{OpensslError("cannot write the key as PEM")};
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

X509Ptr ReadCertificate(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return nullptr;
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

PkeyPtr ReadKey(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return nullptr;
  return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

bool ToWall(const ASN1_TIME* time, Clock::Wall& out) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(time, &tm) != 1) return false;
  out = std::chrono::system_clock::from_time_t(timegm(&tm));
  return true;
}

std::string Rfc3339(Clock::Wall t) {
  const time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

std::vector<std::string> ServiceDnsNames(const std::string& service, const std::string& ns) {
  return {service + "." + ns + ".svc", service + "." + ns + ".svc.cluster.local", service + "." + ns,
          service};
}

Result<WebhookCertificate> GenerateWebhookCertificate(const CertificateOptions& options) {
  if (options.dns_names.empty()) return Error{"no DNS name to issue the webhook certificate for"};
  for (const std::string& name : options.dns_names) {
    if (name.empty() || name.find_first_of(", \t\n") != std::string::npos) {
      return Error{"\"" + name + "\" is not a DNS name"};
    }
  }
  if (options.validity.count() <= 1) return Error{"the validity must be longer than an hour"};

  TESSERA_ASSIGN_OR_RETURN(PkeyPtr ca_key, NewKey());
  TESSERA_ASSIGN_OR_RETURN(X509Ptr ca, NewCertificate(ca_key.get(), "tessera-webhook-ca", options));
  X509_set_issuer_name(ca.get(), X509_get_subject_name(ca.get()));
  if (!AddExtension(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !AddExtension(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !AddExtension(ca.get(), ca.get(), NID_subject_key_identifier, "hash")) {
    return Error{OpensslError("cannot add the CA's extensions")};
  }
  if (X509_sign(ca.get(), ca_key.get(), EVP_sha256()) == 0) return Error{OpensslError("cannot sign the CA")};

  TESSERA_ASSIGN_OR_RETURN(PkeyPtr key, NewKey());
  TESSERA_ASSIGN_OR_RETURN(X509Ptr cert, NewCertificate(key.get(), options.dns_names.front(), options));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.get()));
  std::string alt_names;
  for (const std::string& name : options.dns_names)
    alt_names += (alt_names.empty() ? "DNS:" : ",DNS:") + name;
  if (!AddExtension(cert.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !AddExtension(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature,keyEncipherment") ||
      !AddExtension(cert.get(), ca.get(), NID_ext_key_usage, "serverAuth") ||
      !AddExtension(cert.get(), ca.get(), NID_subject_key_identifier, "hash") ||
      !AddExtension(cert.get(), ca.get(), NID_authority_key_identifier, "keyid:always") ||
      !AddExtension(cert.get(), ca.get(), NID_subject_alt_name, alt_names)) {
    return Error{OpensslError("cannot add the serving certificate's extensions")};
  }
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) == 0) {
    return Error{OpensslError("cannot sign the serving certificate")};
  }
  WebhookCertificate out;
  TESSERA_ASSIGN_OR_RETURN(out.ca_pem, ToPem(ca.get()));
  TESSERA_ASSIGN_OR_RETURN(out.cert_pem, ToPem(cert.get()));
  TESSERA_ASSIGN_OR_RETURN(out.key_pem, ToPem(key.get()));
  return out;
}

CertificateCheck CheckWebhookCertificate(const WebhookCertificate& cert,
                                         const std::vector<std::string>& dns_names, Clock::Wall now,
                                         std::chrono::hours renew_before) {
  CertificateCheck check;
  X509Ptr ca = ReadCertificate(cert.ca_pem);
  X509Ptr leaf = ReadCertificate(cert.cert_pem);
  PkeyPtr key = ReadKey(cert.key_pem);
  ERR_clear_error();
  if (!ca) return {false, "ca.crt is not a PEM certificate", {}};
  if (!leaf) return {false, "tls.crt is not a PEM certificate", {}};
  if (!key) return {false, "tls.key is not a PEM private key", {}};
  Clock::Wall leaf_from{}, ca_until{};
  if (!ToWall(X509_get0_notBefore(leaf.get()), leaf_from) ||
      !ToWall(X509_get0_notAfter(leaf.get()), check.not_after) ||
      !ToWall(X509_get0_notAfter(ca.get()), ca_until)) {
    return {false, "the certificates' validity cannot be read", {}};
  }
  if (X509_check_private_key(leaf.get(), key.get()) != 1) {
    ERR_clear_error();
    return {false, "tls.key is not the key of tls.crt", check.not_after};
  }
  EVP_PKEY* ca_public = X509_get0_pubkey(ca.get());
  if (ca_public == nullptr || X509_verify(leaf.get(), ca_public) != 1) {
    ERR_clear_error();
    return {false, "tls.crt is not signed by ca.crt", check.not_after};
  }
  for (const std::string& name : dns_names) {
    if (X509_check_host(leaf.get(), name.c_str(), name.size(), X509_CHECK_FLAG_NO_WILDCARDS, nullptr) != 1) {
      return {false, "tls.crt is not issued for " + name, check.not_after};
    }
  }
  if (now < leaf_from) return {false, "tls.crt is not valid before " + Rfc3339(leaf_from), check.not_after};
  const Clock::Wall horizon = now + renew_before;
  if (check.not_after <= horizon) {
    return {false, "tls.crt expires " + Rfc3339(check.not_after) + ", within the renewal window",
            check.not_after};
  }
  if (ca_until <= horizon) {
    return {false, "ca.crt expires " + Rfc3339(ca_until) + ", within the renewal window", check.not_after};
  }
  check.usable = true;
  return check;
}

bool CertificateValidAt(const std::string& pem, Clock::Wall now) {
  X509Ptr cert = ReadCertificate(pem);
  ERR_clear_error();
  Clock::Wall from{}, until{};
  return cert && ToWall(X509_get0_notBefore(cert.get()), from) &&
         ToWall(X509_get0_notAfter(cert.get()), until) && from <= now && now < until;
}

std::string Base64Encode(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> Base64Decode(const std::string& text) {
  if (text.size() % 4 != 0) return Error{"not base64: its length is not a multiple of 4"};
  std::string out(3 * text.size() / 4 + 1, '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return Error{"not base64"};
  size_t size = static_cast<size_t>(n);
  // EVP_DecodeBlock counts the bytes the padding stands for.
  for (size_t i = text.size(); i > 0 && text[i - 1] == '='; --i) --size;
  out.resize(size);
  return out;
}

}  // namespace tessera::certs
