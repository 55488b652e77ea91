// `tessera webhook-certs`: the webhook's serving certificate, made and kept by
// tessera (no cert-manager). deploy/scheduler runs it as tessera-scheduler's
// init container; the work is certs::EnsureWebhookCerts (src/certs).
#include <iostream>
#include <string>

#include "certs/webhook_certs.h"
#include "cli/command_registry.h"
#include "kube/config.h"

namespace tessera::cli {
namespace {

struct WebhookCertsFlags {
  certs::WebhookCertsOptions options;
  std::string kubeconfig;
  std::string api_server;
  int validity_days = 365;
  int renew_before_days = 30;
};

int RunWebhookCerts(WebhookCertsFlags& flags) {
  kube::ResolveOptions resolve;
  resolve.kubeconfig = flags.kubeconfig;
  resolve.api_server = flags.api_server;
  auto config = kube::ResolveConfig(resolve);
  if (!config.ok()) {
    std::cerr << "tessera webhook-certs: no API server to talk to: " << config.error().message << "\n";
    return 1;
  }
  auto client = kube::MakeClient(*config);
  flags.options.validity = std::chrono::hours(24 * flags.validity_days);
  flags.options.renew_before = std::chrono::hours(24 * flags.renew_before_days);
  auto outcome = certs::EnsureWebhookCerts(*client, flags.options);
  if (!outcome.ok()) {
    std::cerr << "tessera webhook-certs: " << outcome.error().message << "\n";
    return 1;
  }
  std::cout << "Secret " << flags.options.ns << "/" << flags.options.secret << ": certificate "
            << certs::ActionName(outcome->action);
  if (!outcome->reason.empty()) std::cout << " (" << outcome->reason << ")";
  std::cout << "\nMutatingWebhookConfiguration " << flags.options.webhook_configuration << ": caBundle "
            << (outcome->ca_bundle_updated ? "updated" : "already trusts the CA") << "\n";
  if (!flags.options.write_dir.empty()) {
    std::cout << "wrote " << flags.options.write_dir << "/tls.crt, tls.key, ca.crt\n";
  }
  return 0;
}

const CommandRegistration kWebhookCerts{
    {"webhook-certs", 60, [](CLI::App& root) {
       auto flags = std::make_shared<WebhookCertsFlags>();
       auto* cmd = root.add_subcommand(
           "webhook-certs", "Make or renew the webhook's serving certificate (no cert-manager needed)");
       cmd->footer(
           "\nA CA and a certificate for the webhook Service's DNS names, kept in a Secret, the CA put into\n"
           "the MutatingWebhookConfiguration's caBundle. A valid certificate that does not expire within\n"
           "--renew-before-days is kept (idempotent: every replica may run it). deploy/ runs it as\n"
           "tessera-scheduler's init container (docs/install.md).");
       cmd->add_option("--namespace", flags->options.ns, "namespace of the Service and the Secret")
           ->default_val("kube-system");
       cmd->add_option("--service", flags->options.service,
                       "the webhook's Service (the certificate's DNS names)")
           ->default_val("tessera-scheduler");
       cmd->add_option("--secret", flags->options.secret, "the Secret (type kubernetes.io/tls) that keeps it")
           ->default_val("tessera-scheduler-tls");
       cmd->add_option("--webhook-configuration", flags->options.webhook_configuration,
                       "the MutatingWebhookConfiguration whose caBundle to set")
           ->default_val("tessera-scheduler");
       cmd->add_option("--write-dir", flags->options.write_dir,
                       "also write tls.crt, tls.key and ca.crt into this directory (for tessera-scheduler)");
       cmd->add_option("--validity-days", flags->validity_days, "lifetime of a new CA and certificate")
           ->default_val(365)
           ->check(CLI::Range(2, 3650));
       cmd->add_option("--renew-before-days", flags->renew_before_days,
                       "renew when the certificate expires within this many days")
           ->default_val(30)
           ->check(CLI::Range(1, 3649));
       cmd->add_option("--kubeconfig", flags->kubeconfig,
                       "kubeconfig (default: in-cluster, then $KUBECONFIG)");
       cmd->add_option("--api-server", flags->api_server, "API server URL (overrides the kubeconfig's)");
       cmd->callback([flags] { SetExitCode(RunWebhookCerts(*flags)); });
     }}};

}  // namespace
}  // namespace tessera::cli
