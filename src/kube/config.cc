#include "kube/config.h"

#include "base/files.h"
#include "base/yaml_config.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include <openssl/evp.h>

namespace tessera::kube {
namespace {

namespace fs = std::filesystem;
constexpr const char* kServiceAccountDir = "var/run/secrets/kubernetes.io/serviceaccount";

std::string TrimWs(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

tessera::Result<std::string> Base64Decode(const std::string& in, const std::string& what) {
  std::string clean;
  for (char c : in) {
    if (!std::isspace(static_cast<unsigned char>(c))) clean += c;
  }
  if (clean.size() % 4 != 0) return tessera::Error{what + " is not valid base64"};
  std::string out(clean.size() / 4 * 3, '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(clean.data()), static_cast<int>(clean.size()));
  if (n < 0) return tessera::Error{what + " is not valid base64"};
  size_t len = static_cast<size_t>(n);
  if (!clean.empty() && clean.back() == '=') --len;
  if (clean.size() > 1 && clean[clean.size() - 2] == '=') --len;
  out.resize(len);
  return out;
}

std::string Resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute() || base_dir.empty()) return p;
  return (fs::path(base_dir) / p).string();
}

// Finds the entry named `name` in a kubeconfig list (clusters/users/contexts).
std::optional<YAML::Node> FindNamed(const YAML::Node& list, const std::string& name, const char* field) {
  if (!list || !list.IsSequence()) return std::nullopt;
  for (const auto& entry : list) {
    if (entry.IsMap() && entry["name"] && entry["name"].as<std::string>("") == name) return entry[field];
  }
  return std::nullopt;
}

std::string Str(const YAML::Node& n, const char* key) {
  if (!n || !n.IsMap() || !n[key] || !n[key].IsScalar()) return "";
  return n[key].as<std::string>("");
}

}  // namespace

tessera::Result<ClientConfig> LoadInClusterConfig(const InClusterOptions& options) {
  auto env = options.getenv ? options.getenv : [](const char* k) -> const char* { return std::getenv(k); };
  const char* host = env("KUBERNETES_SERVICE_HOST");
  const char* port = env("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return tessera::Error{
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set"};
  }
  const std::string dir = (fs::path(options.root.empty() ? "/" : options.root) / kServiceAccountDir).string();
  ClientConfig c;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  c.server = "https://" + h + ":" + port;
  c.token_file = dir + "/token";
  TESSERA_ASSIGN_OR_RETURN_WRAP(const std::string token, files::Read(c.token_file),
                                "in-cluster config: service-account token");
  if (TrimWs(token).empty())
    return tessera::Error{"in-cluster config: service-account token " + c.token_file + " is empty"};
  c.tls.ca_file = dir + "/ca.crt";
  if (!fs::exists(c.tls.ca_file)) {
    return tessera::Error{"in-cluster config: CA certificate " + c.tls.ca_file + " does not exist"};
  }
  auto ns = files::Read(dir + "/namespace");
  c.namespace_ = ns.ok() ? TrimWs(*ns) : "default";
  c.source = "in-cluster";
  return c;
}

tessera::Result<ClientConfig> ParseKubeconfig(const std::string& yaml, const std::string& base_dir,
                                              const std::string& origin,
                                              const std::string& context_override) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return tessera::Error{origin + ": not valid YAML: " + e.what()};
  }
  if (!root || !root.IsMap()) return tessera::Error{origin + ": not a kubeconfig (expected a YAML mapping)"};
  try {
    std::string context_name = context_override.empty() ? Str(root, "current-context") : context_override;
    if (context_name.empty()) return tessera::Error{origin + ": no current-context set and no context given"};
    const YAML::Node context = FindNamed(root["contexts"], context_name, "context").value_or(YAML::Node());
    if (!context.IsMap()) return tessera::Error{origin + ": context \"" + context_name + "\" not found"};
    const std::string cluster_name = Str(context, "cluster");
    const std::string user_name = Str(context, "user");
    const YAML::Node cluster = FindNamed(root["clusters"], cluster_name, "cluster").value_or(YAML::Node());
    if (!cluster.IsMap()) {
      return tessera::Error{origin + ": context \"" + context_name + "\" names cluster \"" + cluster_name +
                            "\", which is not defined"};
    }
    ClientConfig c;
    c.source = origin;
    c.namespace_ = Str(context, "namespace");
    if (c.namespace_.empty()) c.namespace_ = "default";
    c.server = Str(cluster, "server");
    if (c.server.empty()) return tessera::Error{origin + ": cluster \"" + cluster_name + "\" has no server"};
    if (c.server.rfind("https://", 0) != 0 && c.server.rfind("http://", 0) != 0) {
      return tessera::Error{origin + ": cluster \"" + cluster_name + "\" server \"" + c.server +
                            "\" is not an http(s) URL"};
    }
    if (const YAML::Node skip = cluster["insecure-skip-tls-verify"]) {
      // The same rule as tessera's own configuration files (base/yaml_config.h).
      auto value = skip.IsScalar() ? config::ParseBool(skip.Scalar()) : config::ParseBool("");
      if (!value.ok()) {
        return tessera::Error{origin + ": cluster \"" + cluster_name + "\" insecure-skip-tls-verify " +
                              value.error().message};
      }
      c.tls.insecure_skip_verify = *value;
    }
    c.tls.ca_file = Resolve(base_dir, Str(cluster, "certificate-authority"));
    if (const std::string data = Str(cluster, "certificate-authority-data"); !data.empty()) {
      TESSERA_ASSIGN_OR_RETURN(c.tls.ca_data, Base64Decode(data, origin + ": cluster \"" + cluster_name +
                                                                     "\" certificate-authority-data"));
    }
    if (!c.tls.ca_file.empty() && c.tls.ca_data.empty() && !fs::exists(c.tls.ca_file)) {
      return tessera::Error{origin + ": cluster \"" + cluster_name + "\" certificate-authority " +
                            c.tls.ca_file + " does not exist"};
    }
    if (!user_name.empty()) {
      const std::optional<YAML::Node> found = FindNamed(root["users"], user_name, "user");
      if (!found) {
        return tessera::Error{origin + ": context \"" + context_name + "\" names user \"" + user_name +
                              "\", which is not defined"};
      }
      const YAML::Node user = *found;
      if (user.IsMap()) {
        c.token = Str(user, "token");
        c.token_file = Resolve(base_dir, Str(user, "tokenFile"));
        if (!c.token_file.empty() && !fs::exists(c.token_file)) {
          return tessera::Error{origin + ": user \"" + user_name + "\" tokenFile " + c.token_file +
                                " does not exist"};
        }
        c.tls.cert_file = Resolve(base_dir, Str(user, "client-certificate"));
        c.tls.key_file = Resolve(base_dir, Str(user, "client-key"));
        for (auto [field, target] : {std::pair{"client-certificate-data", &c.tls.cert_data},
                                     std::pair{"client-key-data", &c.tls.key_data}}) {
          const std::string data = Str(user, field);
          if (data.empty()) continue;
          TESSERA_ASSIGN_OR_RETURN(*target,
                                   Base64Decode(data, origin + ": user \"" + user_name + "\" " + field));
        }
        for (auto [field, file] :
             {std::pair{"client-certificate", &c.tls.cert_file}, std::pair{"client-key", &c.tls.key_file}}) {
          if (!file->empty() && !fs::exists(*file)) {
            return tessera::Error{origin + ": user \"" + user_name + "\" " + field + " " + *file +
                                  " does not exist"};
          }
        }
        const bool has_cert = !c.tls.cert_file.empty() || !c.tls.cert_data.empty();
        const bool has_key = !c.tls.key_file.empty() || !c.tls.key_data.empty();
        if (has_cert != has_key) {
          return tessera::Error{origin + ": user \"" + user_name +
                                "\" needs both a client certificate and a client key (only one is given)"};
        }
        if (user["exec"] || user["auth-provider"]) {
          if (c.token.empty() && c.token_file.empty() && !has_cert) {
            return tessera::Error{origin + ": user \"" + user_name +
                                  "\" uses exec/auth-provider credentials, which tessera does not support; "
                                  "use a token, tokenFile or client certificate"};
          }
        }
      }
    }
    return c;
  } catch (const YAML::Exception& e) {
    return tessera::Error{origin + ": malformed kubeconfig: " + e.what()};
  }
}

tessera::Result<ClientConfig> LoadKubeconfigFile(const std::string& path, const std::string& context) {
  TESSERA_ASSIGN_OR_RETURN_WRAP(const std::string text, files::Read(path), "kubeconfig");
  return ParseKubeconfig(text, fs::path(path).parent_path().string(), "kubeconfig " + path, context);
}

tessera::Result<ClientConfig> ResolveConfig(const ResolveOptions& options) {
  if (!options.api_server.empty()) {
    if (options.kubeconfig.empty()) {
      ClientConfig config;
      config.server = options.api_server;
      config.source = "--api-server";
      return config;
    }
    auto config = LoadKubeconfigFile(options.kubeconfig, options.context);
    if (config.ok()) config->server = options.api_server;
    return config;
  }
  auto env = options.in_cluster.getenv ? options.in_cluster.getenv
                                       : [](const char* k) -> const char* { return std::getenv(k); };
  if (!options.kubeconfig.empty()) return LoadKubeconfigFile(options.kubeconfig, options.context);
  if (const char* list = env("KUBECONFIG"); list != nullptr && *list != '\0') {
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ':')) {
      if (!item.empty() && fs::exists(item)) return LoadKubeconfigFile(item, options.context);
    }
    return tessera::Error{std::string("KUBECONFIG is set to \"") + list + "\" but none of its files exists"};
  }
  const char* host = env("KUBERNETES_SERVICE_HOST");
  if (host != nullptr && *host != '\0') return LoadInClusterConfig(options.in_cluster);
  if (const char* home = env("HOME"); home != nullptr && *home != '\0') {
    const std::string path = std::string(home) + "/.kube/config";
    if (fs::exists(path)) return LoadKubeconfigFile(path, options.context);
  }
  return tessera::Error{
      "no Kubernetes configuration found: pass --kubeconfig, set KUBECONFIG, run in a pod, or create "
      "$HOME/.kube/config"};
}

FileTokenSource::FileTokenSource(std::string path, std::chrono::seconds period, Clock* clock)
    : path_(std::move(path)), period_(period), clock_(OrRealClock(clock)) {}

std::string FileTokenSource::Token() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = clock_->Now();
  if (read_at_ && now - *read_at_ < period_) return token_;
  auto t = files::Read(path_);
  if (t.ok()) token_ = TrimWs(*t);
  read_at_ = now;
  return token_;
}

std::shared_ptr<CurlTransport> MakeTransport(const ClientConfig& config, Clock* clock) {
  CurlTransportOptions o;
  o.server = config.server;
  o.tls = config.tls;
  if (!config.token_file.empty()) {
    auto source = std::make_shared<FileTokenSource>(config.token_file, config.token_reread_period, clock);
    o.token = [source] { return source->Token(); };
  } else if (!config.token.empty()) {
    o.token = [token = config.token] { return token; };
  }
  return std::make_shared<CurlTransport>(std::move(o));
}

std::unique_ptr<Client> MakeClient(const ClientConfig& config, ClientOptions options) {
  return std::make_unique<Client>(MakeTransport(config, options.clock), options);
}

}  // namespace tessera::kube
