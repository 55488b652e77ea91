#include "scheduler/dashboard/dashboard.h"

#include <httplib.h>

#include "base/clock.h"
#include "base/log.h"
#include "kube/client.h"
#include "scheduler/dashboard/assets.h"

namespace tessera::scheduler::dashboard {
namespace {

using Json = nlohmann::json;

// Only what the page itself needs: no other origin is ever reached, and a
// page that tried would log a violation (the Chromium tests read the log).
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

Dashboard::Response JsonResponse(ApiAnswer answer) {
  return {answer.status, "application/json", std::move(answer.body)};
}

Dashboard::Response JsonError(int status, const std::string& message) {
  return {status, "application/json", Json{{"error", message}}.dump()};
}

}  // namespace

std::string NodeAddress(const Json& node) {
  if (!node.is_object() || !node.contains("status") || !node["status"].is_object()) return "";
  const Json& status = node["status"];
  auto it = status.find("addresses");
  if (it == status.end() || !it->is_array()) return "";
  std::string first;
  for (const Json& a : *it) {
    if (!a.is_object() || !a.contains("address") || !a["address"].is_string()) continue;
    const std::string address = a["address"].get<std::string>();
    if (a.value("type", "") == "InternalIP") return address;
    if (first.empty()) first = address;
  }
  return first;
}

Dashboard::Dashboard(DashboardOptions options, DashboardDeps deps)
    : options_(std::move(options)),
      deps_(std::move(deps)),
      pods_(deps_.resources),
      usage_(
          options_.usage, [this] { return Targets(); }, deps_.fetch),
      refresh_thread_(options_.refresh, [this] { Refresh(); }),
      probe_thread_(options_.api_probe_interval, [this] { ProbeApi(); }) {}

Dashboard::~Dashboard() {
  Stop();
}

void Dashboard::UpsertNode(const Json& node) {
  const std::string name = kube::NameOf(node);
  std::string address = NodeAddress(node);
  std::lock_guard lock(mu_);
  addresses_[name] = std::move(address);
}

void Dashboard::DeleteNode(const Json& node) {
  const std::string name = kube::NameOf(node);
  std::lock_guard lock(mu_);
  addresses_.erase(name);
}

void Dashboard::UpsertPod(const Json& pod) {
  pods_.Upsert(pod);
}

void Dashboard::UpsertPod(const PodDigest& pod) {
  pods_.Upsert(pod);
}

void Dashboard::DeletePod(const Json& pod) {
  pods_.Delete(pod);
}

std::vector<UsageTarget> Dashboard::Targets() const {
  std::vector<UsageTarget> targets;
  std::lock_guard lock(mu_);
  targets.reserve(addresses_.size());
  for (const auto& [node, address] : addresses_) targets.push_back({node, address});
  return targets;
}

void Dashboard::ProbeApi() {
  if (!deps_.probe_api) return;
  std::string error = deps_.probe_api();
  const int64_t now = RealClock::Get()->WallUnixMillis();
  std::lock_guard lock(mu_);
  if (error.empty()) {
    if (!status_.api_error.empty()) log::Info("dashboard: the API server answers again");
    status_.api_ok_ms = now;
  } else if (status_.api_error.empty()) {
    log::Warn("dashboard: the API server does not answer; showing the cluster as last seen",
              {{"error", error}});
  }
  status_.api_error = std::move(error);
  status_.api_checked_ms = now;
}

void Dashboard::Refresh() {
  SourceStatus status;
  {
    std::lock_guard lock(mu_);
    status = status_;
  }
  if (deps_.not_ready) status.not_ready = deps_.not_ready();
  MixInput mix;
  if (deps_.learned_mix) mix = deps_.learned_mix();
  std::shared_ptr<const View> view;
  {
    std::lock_guard build(build_mu_);
    view = builder_.Build(*deps_.state, pods_, usage_.Snapshot(), std::move(mix), std::move(status),
                          RealClock::Get()->WallUnixMillis());
  }
  std::lock_guard lock(mu_);
  view_ = std::move(view);
}

void Dashboard::RefreshNow(bool with_usage) {
  ProbeApi();
  if (with_usage) usage_.RunRound();
  Refresh();
}

std::shared_ptr<const View> Dashboard::view() const {
  std::lock_guard lock(mu_);
  return view_;
}

Dashboard::Response Dashboard::Get(const std::string& path,
                                   const std::unordered_map<std::string, std::string>& query) const {
  auto param = [&query](const char* name) {
    auto it = query.find(name);
    return it == query.end() ? std::string() : it->second;
  };
  if (path == "/healthz") return {200, "text/plain", "ok"};
  if (!path.starts_with("/api/")) {
    const Asset* asset = FindAsset(path == "/" ? "/index.html" : path);
    if (!asset) return {404, "text/plain", "no such page: " + path};
    return {200, std::string(asset->content_type), std::string(asset->body)};
  }
  std::shared_ptr<const View> view = this->view();
  if (!view) return JsonError(503, "the dashboard is starting");
  ListQuery q{param("offset"), param("limit"), param("q"),   param("sort"),
              param("ns"),     param("state"), param("node")};
  if (path == "/api/overview") return {200, "application/json", view->overview_json};
  if (path == "/api/namespaces") return {200, "application/json", view->namespaces_json};
  if (path == "/api/nodes") return JsonResponse(NodesPage(*view, q));
  if (path == "/api/pods") return JsonResponse(PodsPage(*view, q));
  constexpr std::string_view kNodes = "/api/nodes/";
  if (path.starts_with(kNodes)) {
    std::string rest = path.substr(kNodes.size());
    const size_t gpus = rest.find("/gpus/");
    if (gpus == std::string::npos) {
      if (rest.empty() || rest.find('/') != std::string::npos)
        return JsonError(404, "no such API path: " + path);
      return JsonResponse(NodeDetail(*view, rest));
    }
    std::string node = rest.substr(0, gpus), uuid = rest.substr(gpus + 6);
    if (node.empty() || uuid.empty() || uuid.find('/') != std::string::npos)
      return JsonError(404, "no such API path: " + path);
    return JsonResponse(GpuDetail(*view, node, uuid));
  }
  return JsonError(404, "no such API path: " + path);
}

Status Dashboard::Start() {
  {
    std::lock_guard lock(mu_);
    if (started_) return Status::Ok();
    started_ = true;
  }
  auto server = std::make_unique<httplib::Server>();
  const size_t threads = static_cast<size_t>(std::max(1, options_.threads));
  server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server->set_tcp_nodelay(true);
  server->Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
    std::unordered_map<std::string, std::string> query;
    for (const auto& [k, v] : req.params) query.emplace(k, v);
    Response r = Get(req.path, query);
    res.status = r.status;
    res.set_header("Content-Security-Policy", kContentSecurityPolicy);
    res.set_header("X-Content-Type-Options", "nosniff");
    if (!req.path.starts_with("/api/") && r.status == 200 && req.path != "/healthz") {
      const Asset* asset = FindAsset(req.path == "/" ? "/index.html" : req.path);
      res.set_header("ETag", std::string(asset->etag));
      res.set_header("Cache-Control", "no-cache");
      if (req.get_header_value("If-None-Match") == asset->etag) {
        res.status = 304;
        return;
      }
    } else {
      res.set_header("Cache-Control", "no-store");
    }
    res.body = std::move(r.body);
    res.set_header("Content-Type", r.content_type);
  });
  http_ = std::make_unique<HttpListener>(std::move(server));
  auto port = http_->Listen(options_.bind_address, options_.port);
  if (!port.ok()) return Error{"dashboard.port: " + port.error().message};
  port_ = *port;
  Refresh();  // the first view, before the first request
  usage_.Start();
  refresh_thread_.Start();
  probe_thread_.Start();
  return Status::Ok();
}

void Dashboard::Stop() {
  {
    std::lock_guard lock(mu_);
    if (!started_) return;
    started_ = false;
  }
  if (http_) http_->Stop();
  probe_thread_.Stop();
  refresh_thread_.Stop();
  usage_.Stop();
}

}  // namespace tessera::scheduler::dashboard
