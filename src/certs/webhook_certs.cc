#include "certs/webhook_certs.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "base/files.h"

namespace tessera::certs {

const kube::ResourceType kSecrets{"/api/v1", "v1", "Secret", "secrets", true};
const kube::ResourceType kMutatingWebhookConfigurations{
    "/apis/admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1",
    "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", false};

namespace {

constexpr int kAttempts = 5;  // conflicts with other replicas before giving up

// The certificate in a Secret's data, or why there is none.
Result<WebhookCertificate> FromSecret(const kube::Json& secret) {
  if (!secret.contains("data") || !secret["data"].is_object()) return Error{"it has no data"};
  const kube::Json& data = secret["data"];
  WebhookCertificate cert;
  for (auto [key, field] : {std::pair{"ca.crt", &cert.ca_pem}, std::pair{"tls.crt", &cert.cert_pem},
                            std::pair{"tls.key", &cert.key_pem}}) {
    if (!data.contains(key) || !data[key].is_string()) return Error{std::string("it has no ") + key};
    auto decoded = Base64Decode(data[key].get<std::string>());
    if (!decoded.ok()) return decoded.error().Wrap(key);
    *field = *decoded;
  }
  return cert;
}

kube::Json SecretData(const WebhookCertificate& cert) {
  return {{"ca.crt", Base64Encode(cert.ca_pem)},
          {"tls.crt", Base64Encode(cert.cert_pem)},
          {"tls.key", Base64Encode(cert.key_pem)}};
}

std::string ApiMessage(const kube::ApiError& e) {
  return e.message.empty() ? e.reason : e.message;
}

// The Secret's certificate after step 1-2.
Result<WebhookCertsOutcome> EnsureSecret(kube::Client& client, const WebhookCertsOptions& options,
                                         std::string* previous_ca) {
  Clock* clock = OrRealClock(options.clock);
  const std::vector<std::string> names = ServiceDnsNames(options.service, options.ns);
  const std::string where = "Secret " + options.ns + "/" + options.secret;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    auto secret = client.Get(kSecrets, options.ns, options.secret);
    if (!secret.ok() && !secret.error().IsNotFound()) {
      return Error{"cannot read " + where + ": " + ApiMessage(secret.error())};
    }
    WebhookCertsOutcome outcome;
    if (secret.ok()) {
      auto kept = FromSecret(*secret);
      if (kept.ok()) {
        CertificateCheck check =
            CheckWebhookCertificate(*kept, names, clock->WallNow(), options.renew_before);
        if (check.usable) {
          outcome.action = WebhookCertsOutcome::Action::kReused;
          outcome.certificate = *kept;
          return outcome;
        }
        outcome.reason = check.reason;
        *previous_ca = kept->ca_pem;
      } else {
        outcome.reason = kept.error().message;
      }
      outcome.action = WebhookCertsOutcome::Action::kRenewed;
    } else {
      outcome.action = WebhookCertsOutcome::Action::kCreated;
    }
    CertificateOptions generate;
    generate.dns_names = names;
    generate.validity = options.validity;
    generate.now = clock->WallNow();
    TESSERA_ASSIGN_OR_RETURN(outcome.certificate, GenerateWebhookCertificate(generate));
    kube::ApiResult<kube::Json> written = kube::ApiError{};
    if (secret.ok()) {
      kube::Json updated = *secret;
      updated["type"] = "kubernetes.io/tls";
      updated["data"] = SecretData(outcome.certificate);
      written = client.Update(kSecrets, options.ns, updated);
    } else {
      kube::Json created = {{"metadata",
                             {{"name", options.secret},
                              {"namespace", options.ns},
                              {"labels", {{"app.kubernetes.io/managed-by", "tessera-webhook-certs"}}}}},
                            {"type", "kubernetes.io/tls"},
                            {"data", SecretData(outcome.certificate)}};
      written = client.Create(kSecrets, options.ns, created);
    }
    if (written.ok()) return outcome;
    if (!written.error().IsConflict()) {
      return Error{"cannot write " + where + ": " + ApiMessage(written.error())};
    }
    // Another replica wrote first: use what it wrote.
  }
  return Error{"cannot write " + where + ": it kept changing under us (" + std::to_string(kAttempts) +
               " attempts)"};
}

// The caBundle the webhooks should carry: the CA, and the previous one while it is valid.
std::string Bundle(const std::string& ca, const std::string& previous, Clock::Wall now) {
  if (previous.empty() || previous == ca || !CertificateValidAt(previous, now)) return ca;
  return ca + previous;
}

Result<bool> EnsureCaBundle(kube::Client& client, const WebhookCertsOptions& options,
                            const std::string& bundle, const std::string& ca) {
  const std::string where = "MutatingWebhookConfiguration " + options.webhook_configuration;
  const std::string encoded = Base64Encode(bundle);
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    auto config = client.Get(kMutatingWebhookConfigurations, "", options.webhook_configuration);
    if (!config.ok()) {
      if (config.error().IsNotFound()) {
        return Error{where + " does not exist: apply deploy/ (kubectl apply -k deploy/) first"};
      }
      return Error{"cannot read " + where + ": " + ApiMessage(config.error())};
    }
    kube::Json updated = *config;
    if (!updated.contains("webhooks") || !updated["webhooks"].is_array() || updated["webhooks"].empty()) {
      return Error{where + " has no webhooks"};
    }
    bool changed = false;
    for (kube::Json& webhook : updated["webhooks"]) {
      if (!webhook.is_object()) return Error{where + ": a webhook entry is not an object"};
      kube::Json& client_config = webhook["clientConfig"];
      const std::string current = client_config.is_object() ? client_config.value("caBundle", "") : "";
      // Already trusting the CA (alone or beside the previous one): leave it.
      auto decoded = Base64Decode(current);
      if (decoded.ok() && decoded->find(ca) != std::string::npos) continue;
      client_config["caBundle"] = encoded;
      changed = true;
    }
    if (!changed) return false;
    auto written = client.Update(kMutatingWebhookConfigurations, "", updated);
    if (written.ok()) return true;
    if (!written.error().IsConflict())
      return Error{"cannot update " + where + ": " + ApiMessage(written.error())};
  }
  return Error{"cannot update " + where + ": it kept changing under us"};
}

Status WriteFiles(const std::string& dir, const WebhookCertificate& cert) {
  TESSERA_RETURN_IF_ERROR(files::MakeDirs(dir));
  TESSERA_RETURN_IF_ERROR(files::ReplaceAtomically(files::Join(dir, "ca.crt"), cert.ca_pem));
  TESSERA_RETURN_IF_ERROR(files::ReplaceAtomically(files::Join(dir, "tls.crt"), cert.cert_pem));
  const std::string key = files::Join(dir, "tls.key");
  TESSERA_RETURN_IF_ERROR(files::ReplaceAtomically(key, cert.key_pem));
  if (::chmod(key.c_str(), 0600) != 0)
    return Error{"cannot make " + key + " private: " + std::strerror(errno)};
  return Status::Ok();
}

}  // namespace

const char* ActionName(WebhookCertsOutcome::Action action) {
  switch (action) {
    case WebhookCertsOutcome::Action::kReused:
      return "reused";
    case WebhookCertsOutcome::Action::kCreated:
      return "created";
    case WebhookCertsOutcome::Action::kRenewed:
      return "renewed";
  }
  return "reused";
}

Result<WebhookCertsOutcome> EnsureWebhookCerts(kube::Client& client, const WebhookCertsOptions& options) {
  if (options.renew_before >= options.validity) {
    return Error{"the renewal window must be shorter than the validity"};
  }
  // Without the webhook configuration there is nothing to trust the CA: stop before writing anything.
  const std::string where = "MutatingWebhookConfiguration " + options.webhook_configuration;
  if (auto config = client.Get(kMutatingWebhookConfigurations, "", options.webhook_configuration);
      !config.ok()) {
    if (config.error().IsNotFound()) {
      return Error{where + " does not exist: apply deploy/ (kubectl apply -k deploy/) first"};
    }
    return Error{"cannot read " + where + ": " + ApiMessage(config.error())};
  }
  std::string previous_ca;
  TESSERA_ASSIGN_OR_RETURN(WebhookCertsOutcome outcome, EnsureSecret(client, options, &previous_ca));
  const std::string bundle =
      Bundle(outcome.certificate.ca_pem, previous_ca, OrRealClock(options.clock)->WallNow());
  TESSERA_ASSIGN_OR_RETURN(outcome.ca_bundle_updated,
                           EnsureCaBundle(client, options, bundle, outcome.certificate.ca_pem));
  if (!options.write_dir.empty()) {
    TESSERA_RETURN_IF_ERROR_WRAP(WriteFiles(options.write_dir, outcome.certificate), "writing the files");
  }
  return outcome;
}

}  // namespace tessera::certs
