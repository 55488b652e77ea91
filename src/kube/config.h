// Where the API server is and how to authenticate to it.
//
// Resolution order (ResolveConfig):
//   1. an explicit kubeconfig path (the --kubeconfig flag),
//   2. the KUBECONFIG environment variable (the first existing file of its
//      ':'-separated list),
//   3. in-cluster: KUBERNETES_SERVICE_HOST/PORT and the service-account files,
//   4. $HOME/.kube/config.
// Every failure names the file and the field at fault.
//
// Thread-safety: plain functions; FileTokenSource is safe to call concurrently.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/clock.h"
#include "base/result.h"
#include "kube/client.h"
#include "kube/curl_transport.h"

namespace tessera::kube {

struct ClientConfig {
  std::string server;  // https://host:port
  TlsConfig tls;
  std::string token;       // static bearer token
  std::string token_file;  // re-read periodically (bound service-account tokens rotate)
  std::chrono::seconds token_reread_period{60};
  std::string namespace_;  // default namespace (in-cluster: the pod's; kubeconfig: the context's)
  std::string source;      // where this came from, for messages ("in-cluster", "kubeconfig /path")
};

struct InClusterOptions {
  // Root under which /var/run/secrets/kubernetes.io/serviceaccount lives ("" = "/").
  std::string root;
  // Environment lookup (default: getenv).
  std::function<const char*(const char*)> getenv;
};

// In-cluster configuration; fails when not running in a pod.
tessera::Result<ClientConfig> LoadInClusterConfig(const InClusterOptions& options = {});

// Parses a kubeconfig file. `context` overrides current-context when non-empty.
// Relative file paths inside it resolve against the file's directory.
tessera::Result<ClientConfig> LoadKubeconfigFile(const std::string& path, const std::string& context = "");
// Parses kubeconfig YAML text; `base_dir` resolves relative paths; `origin` names it in errors.
tessera::Result<ClientConfig> ParseKubeconfig(const std::string& yaml, const std::string& base_dir,
                                              const std::string& origin, const std::string& context = "");

struct ResolveOptions {
  std::string kubeconfig;  // explicit path (flag); "" = not given
  // An explicit server URL (flag). Without `kubeconfig` it is used alone, with
  // no credentials (a local or test API server); with one it overrides the
  // kubeconfig's server.
  std::string api_server;
  std::string context;
  InClusterOptions in_cluster;
};
tessera::Result<ClientConfig> ResolveConfig(const ResolveOptions& options = {});

// Reads a token file, caching it for `period` (on `clock`); on a read failure
// keeps the last good token.
class FileTokenSource {
 public:
  FileTokenSource(std::string path, std::chrono::seconds period, Clock* clock = nullptr);
  std::string Token();

 private:
  const std::string path_;
  const std::chrono::seconds period_;
  Clock* const clock_;
  std::mutex mu_;
  std::string token_;                        // guarded by mu_
  std::optional<Clock::Monotonic> read_at_;  // guarded by mu_
};

// Builds the transport for a config (TLS, token source).
std::shared_ptr<CurlTransport> MakeTransport(const ClientConfig& config, Clock* clock = nullptr);

// A Client for `config` over MakeTransport(config); options.clock also drives
// the token re-read.
std::unique_ptr<Client> MakeClient(const ClientConfig& config, ClientOptions options = {});

}  // namespace tessera::kube
