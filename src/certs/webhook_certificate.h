// The webhook's certificate: a self-signed CA and a serving certificate it
// signs for the webhook Service's DNS names, made with OpenSSL's libcrypto.
// The API server trusts the CA through the webhook configuration's caBundle;
// tessera-scheduler serves the certificate and key.
//
// Keys are ECDSA P-256 (the API server accepts them; generating one takes
// microseconds). The CA's key is not kept: a renewal makes a new CA too, and
// the caller puts it into caBundle.
//
// Errors are values; no exception leaves these functions. Thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/result.h"

namespace tessera::certs {

// PEM text of each part.
struct WebhookCertificate {
  std::string ca_pem;    // the CA certificate (caBundle, Secret key ca.crt)
  std::string cert_pem;  // the serving certificate (tls.crt)
  std::string key_pem;   // its private key, PKCS#8 (tls.key)
};

struct CertificateOptions {
  std::vector<std::string> dns_names;  // subjectAltNames; the first is also the common name
  std::chrono::hours validity{24 * 365};
  Clock::Wall now = std::chrono::system_clock::now();
};

// A new CA and serving certificate, valid from an hour before `now` (clock
// skew between nodes) for `validity`. Errors when no DNS name is given or
// OpenSSL fails.
Result<WebhookCertificate> GenerateWebhookCertificate(const CertificateOptions& options);

// The DNS names a Service is reached by from the API server:
// <service>.<namespace>.svc is the one it uses; the others cover clients
// that spell it differently.
std::vector<std::string> ServiceDnsNames(const std::string& service, const std::string& ns);

struct CertificateCheck {
  bool usable = false;
  std::string reason;       // why not ("" when usable): unreadable, wrong names, expiring, ...
  Clock::Wall not_after{};  // of the serving certificate, when it could be read
};

// Whether `cert` can keep serving `dns_names` from `now` for at least
// `renew_before`: every part parses, the key is the certificate's, the CA
// signed the certificate, every name is in its subjectAltNames, and neither
// certificate expires within `renew_before` (nor is not yet valid).
CertificateCheck CheckWebhookCertificate(const WebhookCertificate& cert,
                                         const std::vector<std::string>& dns_names, Clock::Wall now,
                                         std::chrono::hours renew_before);

// Whether `pem` holds a certificate that is valid at `now`.
bool CertificateValidAt(const std::string& pem, Clock::Wall now);

// Standard base64 (RFC 4648, padded), as Secret data is.
std::string Base64Encode(const std::string& bytes);
Result<std::string> Base64Decode(const std::string& text);

}  // namespace tessera::certs
