// EnsureWebhookCerts: the webhook's certificate, kept by tessera in the
// cluster. Run before tessera-scheduler starts (the `tessera webhook-certs`
// init container in deploy/scheduler), by every replica:
//
//  0. Checks that the MutatingWebhookConfiguration exists (else nothing is written).
//  1. Reads the Secret (kubernetes.io/tls: tls.crt, tls.key, ca.crt). When it
//     holds a certificate CheckWebhookCertificate finds usable for the
//     Service's DNS names for longer than `renew_before`, it is kept as is.
//  2. Otherwise generates a new CA and certificate and writes them: a Create
//     when there is no Secret, else an Update of the version read. A
//     conflict (another replica wrote first) restarts at 1, so all replicas
//     end up serving the same certificate.
//  3. Sets every webhook's clientConfig.caBundle in the
//     MutatingWebhookConfiguration to the Secret's CA (unless it already
//     trusts it), by an Update of the version read (a conflict re-reads). During a
//     renewal the previous CA, while still valid, stays in caBundle beside
//     the new one, so replicas still serving the old certificate keep being
//     trusted until they restart.
//  4. Writes tls.crt and tls.key into `write_dir` when given (the volume
//     tessera-scheduler reads them from).
//
// Nothing else is changed; a failure changes nothing after the step that failed
// (a Secret written stays valid for the next run). Thread-compatible.
#pragma once

#include <chrono>
#include <string>

#include "base/clock.h"
#include "base/result.h"
#include "certs/webhook_certificate.h"
#include "kube/client.h"

namespace tessera::certs {

struct WebhookCertsOptions {
  std::string ns = "kube-system";
  std::string service = "tessera-scheduler";                // the webhook Service
  std::string secret = "tessera-scheduler-tls";             // where the certificate is kept
  std::string webhook_configuration = "tessera-scheduler";  // the MutatingWebhookConfiguration
  std::chrono::hours validity{24 * 365};
  std::chrono::hours renew_before{24 * 30};
  std::string write_dir;   // "" = write no files
  Clock* clock = nullptr;  // nullptr: the real clock
};

struct WebhookCertsOutcome {
  enum class Action { kReused, kCreated, kRenewed };
  Action action = Action::kReused;
  std::string reason;  // kRenewed: why the old one was not kept
  bool ca_bundle_updated = false;
  WebhookCertificate certificate;
};
const char* ActionName(WebhookCertsOutcome::Action action);

extern const kube::ResourceType kSecrets;
extern const kube::ResourceType kMutatingWebhookConfigurations;

Result<WebhookCertsOutcome> EnsureWebhookCerts(kube::Client& client, const WebhookCertsOptions& options);

}  // namespace tessera::certs
