#include "apiserver/fake_apiserver.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <random>
#include <set>

#include "apiserver/merge_patch.h"
#include "apiserver/selector.h"

namespace tessera::testing {

struct FakeApiServer::Kind {
  std::string prefix;  // "/api/v1"
  std::string api_version;
  std::string kind;
  std::string plural;
  bool namespaced;
  bool has_status;
  std::set<std::string> fields;  // supported field-selector paths besides metadata.name/namespace
};

namespace {

using Kind = FakeApiServer::Kind;

const std::vector<Kind>& Kinds() {
  static const std::vector<Kind> kinds = {
      {"/api/v1",
       "v1",
       "Pod",
       "pods",
       true,
       true,
       {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "status.phase", "status.podIP", "status.nominatedNodeName"}},
      {"/api/v1", "v1", "Node", "nodes", false, true, {"spec.unschedulable"}},
      {"/api/v1",
       "v1",
       "Event",
       "events",
       true,
       false,
       {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
        "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
        "reportingComponent", "source", "type"}},
      {"/apis/coordination.k8s.io/v1", "coordination.k8s.io/v1", "Lease", "leases", true, false, {}},
      // What tessera-scheduler's preempt verb lists (preemption.h).
      {"/apis/policy/v1", "policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", true, true, {}},
      // What `tessera webhook-certs` keeps the webhook's certificate in and trusts it by.
      {"/api/v1", "v1", "Secret", "secrets", true, false, {"type"}},
      // Checked at pod creation (QuotaRefusal below).
      {"/api/v1", "v1", "ResourceQuota", "resourcequotas", true, true, {}},
      {"/apis/admissionregistration.k8s.io/v1",
       "admissionregistration.k8s.io/v1",
       "MutatingWebhookConfiguration",
       "mutatingwebhookconfigurations",
       false,
       false,
       {}},
      // Dynamic Resource Allocation (resource.k8s.io/v1, GA in 1.34). ResourceSlices
      // take the field selectors of 1.34's server; spec.pool.name came later, so
      // code that relies on it would fail against a 1.34 cluster and is refused here.
      {"/apis/resource.k8s.io/v1", "resource.k8s.io/v1", "DeviceClass", "deviceclasses", false, false, {}},
      {"/apis/resource.k8s.io/v1",
       "resource.k8s.io/v1",
       "ResourceSlice",
       "resourceslices",
       false,
       false,
       {"spec.nodeName", "spec.driver"}},
      {"/apis/resource.k8s.io/v1", "resource.k8s.io/v1", "ResourceClaim", "resourceclaims", true, true, {}},
      {"/apis/resource.k8s.io/v1",
       "resource.k8s.io/v1",
       "ResourceClaimTemplate",
       "resourceclaimtemplates",
       true,
       false,
       {}},
  };
  return kinds;
}

const Kind* FindKind(const std::string& prefix, const std::string& plural) {
  for (const Kind& k : Kinds()) {
    if (k.plural == plural && (prefix.empty() || k.prefix == prefix)) return &k;
  }
  return nullptr;
}

Json StatusBody(int code, const std::string& reason, const std::string& message,
                const Json& details = nullptr) {
  Json st = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", Json::object()},
             {"status", "Failure"}, {"message", message}, {"reason", reason},
             {"code", code}};
  if (!details.is_null()) st["details"] = details;
  return st;
}

// The API server's words for a watch that asks for history it no longer has.
std::string TooOldMessage(const std::string& asked_rv, uint64_t compacted_rv) {
  return "too old resource version: " + asked_rv + " (" + std::to_string(compacted_rv + 1) + ")";
}

// That refusal as a watch event (an ERROR carrying a 410 Status).
std::string ExpiredEvent(const std::string& message) {
  return Json({{"type", "ERROR"}, {"object", StatusBody(410, "Expired", message)}}).dump();
}

std::string Key(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

std::string MetaString(const Json& o, const char* field) {
  if (!o.is_object() || !o.contains("metadata") || !o["metadata"].is_object()) return "";
  const Json& m = o["metadata"];
  return m.contains(field) && m[field].is_string() ? m[field].get<std::string>() : "";
}

std::string Now3339() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool ParseRv(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  *out = std::stoull(s);
  return true;
}

// "pods", or "leases.coordination.k8s.io" for a named group, as the server names them.
std::string QualifiedPlural(const Kind& kind) {
  const size_t slash = kind.api_version.find('/');
  if (slash == std::string::npos) return kind.plural;
  return kind.plural + "." + kind.api_version.substr(0, slash);
}

Json WithoutTypeMeta(Json o) {
  o.erase("kind");
  o.erase("apiVersion");
  return o;
}

}  // namespace

// A parsed request path.
struct FakeApiServer::Route {
  const Kind* kind = nullptr;
  std::string ns;    // from the path
  std::string name;  // "" for collections
  std::string subresource;
  bool bindings_collection = false;  // POST /api/v1/namespaces/<ns>/bindings
};

struct FakeApiServer::WatchState {
  const Kind* kind = nullptr;
  std::string ns;
  LabelSelector labels;
  FieldSelector fields;
  bool bookmarks = false;
  uint64_t last_rv = 0;
  std::vector<std::string> initial;  // lines to send first
  // The current objects still to send as ADDED, read a chunk at a time
  // (see ServeWatch), then the initial-events-end BOOKMARK when asked for.
  bool listing = false;
  bool end_with_bookmark = false;
  std::optional<std::string> cursor;  // last key sent
  std::chrono::steady_clock::time_point deadline;
  uint64_t drop_generation = 0;
  uint64_t bookmark_generation = 0;
  std::chrono::steady_clock::time_point last_bookmark;
  bool garbage = false;
  bool gone = false;
  uint64_t gone_rv = 0;

  bool Passes(const Json& o) const {
    if (o.is_null()) return false;
    if (!ns.empty() && MetaString(o, "namespace") != ns) return false;
    const Json labels_json =
        o.contains("metadata") && o["metadata"].contains("labels") ? o["metadata"]["labels"] : Json();
    return labels.Matches(labels_json) && fields.Matches(o);
  }
};

FakeApiServer::FakeApiServer(FakeApiServerOptions options)
    : options_(std::move(options)), port_(options_.port), fault_rng_(options_.fault_seed) {}

FakeApiServer::~FakeApiServer() {
  Stop();
}

tessera::Status FakeApiServer::Start() {
  if (http_) return tessera::Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = false;
  }
  std::unique_ptr<httplib::Server> server;
  if (!options_.tls_cert_file.empty()) {
    auto tls = std::make_unique<httplib::SSLServer>(
        options_.tls_cert_file.c_str(), options_.tls_key_file.c_str(),
        options_.client_ca_file.empty() ? nullptr : options_.client_ca_file.c_str());
    if (!tls->is_valid()) return tessera::Error{"fake apiserver: cannot load TLS certificate or key"};
    server = std::move(tls);
  } else {
    server = std::make_unique<httplib::Server>();
  }
  const size_t threads = options_.threads;
  server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server->set_keep_alive_timeout(options_.keep_alive_seconds);
  // Small answers on kept-alive connections: without TCP_NODELAY, Nagle's
  // algorithm and the client's delayed ACKs stall each response by ~40 ms.
  server->set_tcp_nodelay(true);
  server->set_read_timeout(5, 0);
  server->set_write_timeout(5, 0);
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
  const std::string any = R"(/.*)";
  server->Get(any, handler);
  server->Post(any, handler);
  server->Put(any, handler);
  server->Patch(any, handler);
  server->Delete(any, handler);
  if (port_ == 0) {
    port_ = server->bind_to_any_port(options_.host);
    if (port_ <= 0) return tessera::Error{"fake apiserver: cannot bind " + options_.host};
  } else {
    // Rebinding the same port after Stop(); SO_REUSEADDR makes this immediate.
    bool bound = false;
    for (int attempt = 0; attempt < 50 && !bound; ++attempt) {
      bound = server->bind_to_port(options_.host, port_);
      if (!bound) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!bound)
      return tessera::Error{"fake apiserver: cannot bind " + options_.host + ":" + std::to_string(port_)};
  }
  http_ = std::move(server);
  httplib::Server* raw = http_.get();
  listener_ = std::thread([raw] { raw->listen_after_bind(); });
  for (int i = 0; i < 500 && !raw->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return tessera::Status::Ok();
}

void FakeApiServer::Stop() {
  if (!http_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  http_->stop();
  if (listener_.joinable()) listener_.join();
  http_.reset();
}

bool FakeApiServer::running() const {
  return http_ != nullptr;
}
int FakeApiServer::port() const {
  return port_;
}
std::string FakeApiServer::url() const {
  return (options_.tls_cert_file.empty() ? "http://" : "https://") + options_.host + ":" +
         std::to_string(port_);
}

uint64_t FakeApiServer::CurrentResourceVersion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rv_;
}

void FakeApiServer::AddFault(Fault fault) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.push_back(std::move(fault));
}

void FakeApiServer::ClearFaults() {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.clear();
}

uint64_t FakeApiServer::FaultsInjected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_injected_;
}

void FakeApiServer::DropWatches() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++drop_generation_;
  }
  cv_.notify_all();
}

void FakeApiServer::CompactHistory() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    history_.clear();
    compacted_rv_ = rv_;
  }
  cv_.notify_all();
}

void FakeApiServer::SetGoneAsHttpStatus(bool http) {
  std::lock_guard<std::mutex> lock(mu_);
  gone_as_http_ = http;
}

void FakeApiServer::SendBookmarks() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++bookmark_generation_;
  }
  cv_.notify_all();
}

size_t FakeApiServer::ActiveWatches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_watches_;
}

std::vector<RequestRecord> FakeApiServer::Requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<RequestRecord>(requests_.begin(), requests_.end());
}

void FakeApiServer::LogRequestLocked(RequestRecord record) {
  // TESSERA_APISERVER_REQUEST_LOG=<file>: each request is also appended there as
  // one tab-separated line (method, path, watch, User-Agent, status), so a test
  // can audit the calls of other test programs (tests/integration/security).
  if (const char* file = std::getenv("TESSERA_APISERVER_REQUEST_LOG"); file != nullptr && *file != '\0') {
    std::ofstream(file, std::ios::app)
        << record.method << '\t' << record.path << '\t' << (record.watch ? "watch" : "-") << '\t'
        << record.user_agent << '\t' << record.status << '\n';
  }
  requests_.push_back(std::move(record));
  while (requests_.size() > options_.request_log_limit) requests_.pop_front();
}

void FakeApiServer::ClearRequests() {
  std::lock_guard<std::mutex> lock(mu_);
  requests_.clear();
}

uint64_t FakeApiServer::NextRvLocked() {
  return ++rv_;
}

void FakeApiServer::RecordEventLocked(const std::string& plural, const std::string& type, const Json& object,
                                      const Json& prev) {
  uint64_t rv = 0;
  ParseRv(MetaString(object, "resourceVersion"), &rv);
  history_.push_back(HistoryEvent{rv, plural, type, object, prev});
  while (history_.size() > options_.history_limit) {
    compacted_rv_ = history_.front().rv;
    history_.pop_front();
  }
  cv_.notify_all();
}

tessera::Result<Json> FakeApiServer::CreateObject(const std::string& plural, Json object) {
  const Kind* kind = FindKind("", plural);
  if (kind == nullptr) return tessera::Error{"fake apiserver: unknown resource " + plural};
  std::lock_guard<std::mutex> lock(mu_);
  const std::string ns = kind->namespaced ? MetaString(object, "namespace") : "";
  auto [status, body] =
      CreateLocked(*kind, ns.empty() && kind->namespaced ? "default" : ns, std::move(object));
  if (status >= 300) return tessera::Error{body.value("message", std::string("create failed"))};
  return body;
}

std::optional<Json> FakeApiServer::GetObject(const std::string& plural, const std::string& ns,
                                             const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto p = objects_.find(plural);
  if (p == objects_.end()) return std::nullopt;
  auto it = p->second.find(Key(ns, name));
  if (it == p->second.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> FakeApiServer::ListObjects(const std::string& plural) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Json> out;
  auto p = objects_.find(plural);
  if (p == objects_.end()) return out;
  for (const auto& [k, o] : p->second) out.push_back(o);
  return out;
}

// ---- request dispatch -------------------------------------------------------

namespace {

std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 1;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) parts.push_back(PercentDecode(path.substr(start, slash - start)));
    start = slash + 1;
  }
  return parts;
}

void Reply(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void ReplyStatus(httplib::Response& res, int code, const std::string& reason, const std::string& message,
                 const Json& details = nullptr) {
  Reply(res, code, StatusBody(code, reason, message, details));
}

void NotFound(httplib::Response& res, const Kind& kind, const std::string& name) {
  ReplyStatus(res, 404, "NotFound", kind.plural + " \"" + name + "\" not found",
              {{"name", name}, {"kind", kind.plural}});
}

// The request's labelSelector and fieldSelector into `filter`, as a list or a
// watch of `kind` takes them; false, with a 400 answered, when one does not
// parse or names a field `kind` cannot be selected by.
bool ParseSelectors(const Kind& kind, const httplib::Request& req, httplib::Response& res,
                    FakeApiServer::WatchState& filter) {
  auto labels = LabelSelector::Parse(req.get_param_value("labelSelector"));
  if (!labels.ok()) {
    ReplyStatus(res, 400, "BadRequest", "unable to parse requirement: " + labels.error().message);
    return false;
  }
  auto fields = FieldSelector::Parse(req.get_param_value("fieldSelector"));
  if (!fields.ok()) {
    ReplyStatus(res, 400, "BadRequest", fields.error().message);
    return false;
  }
  for (const auto& r : fields->requirements()) {
    if (r.path != "metadata.name" && r.path != "metadata.namespace" && !kind.fields.count(r.path)) {
      ReplyStatus(res, 400, "BadRequest", "field label not supported: " + r.path);
      return false;
    }
  }
  filter.labels = *labels;
  filter.fields = *fields;
  return true;
}

}  // namespace

void FakeApiServer::Handle(const httplib::Request& req, httplib::Response& res) {
  RequestRecord record;
  record.method = req.method;
  record.path = req.path;
  record.target = req.target;
  record.content_type = req.get_header_value("Content-Type");
  record.user_agent = req.get_header_value("User-Agent");
  record.body = req.body;
  record.watch = req.get_param_value("watch") == "true" || req.get_param_value("watch") == "1";

  // Faults first: they model a broken server or network in front of the store.
  std::optional<Fault> fault;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = faults_.begin(); it != faults_.end(); ++it) {
      if (!it->method.empty() && it->method != req.method) continue;
      if (!it->path_contains.empty() && req.target.find(it->path_contains) == std::string::npos) continue;
      if (it->applies_to == Fault::Applies::kWatchOnly && !record.watch) continue;
      if (it->applies_to == Fault::Applies::kNonWatch && record.watch) continue;
      if (it->probability < 1.0 &&
          std::uniform_real_distribution<double>(0.0, 1.0)(fault_rng_) >= it->probability) {
        continue;
      }
      fault = *it;
      ++faults_injected_;
      if (it->times > 0 && --it->times == 0) faults_.erase(it);
      break;
    }
  }
  bool garbage_watch = false;
  if (fault) {
    switch (fault->kind) {
      case Fault::Kind::kDelay:
        std::this_thread::sleep_for(fault->delay);
        break;
      case Fault::Kind::kStatus:
        ReplyStatus(res, fault->status, fault->status >= 500 ? "InternalError" : "BadRequest",
                    "injected fault: status " + std::to_string(fault->status));
        record.status = res.status;
        {
          std::lock_guard<std::mutex> lock(mu_);
          LogRequestLocked(std::move(record));
        }
        return;
      case Fault::Kind::kGarbage:
        if (record.watch) {
          garbage_watch = true;
          break;
        }
        res.status = 200;
        res.set_content("<html>this is not the API server you are looking for{", "application/json");
        record.status = 200;
        {
          std::lock_guard<std::mutex> lock(mu_);
          LogRequestLocked(std::move(record));
        }
        return;
    }
  }

  if (!options_.bearer_token.empty() &&
      req.get_header_value("Authorization") != "Bearer " + options_.bearer_token) {
    ReplyStatus(res, 401, "Unauthorized", "Unauthorized");
  } else if (req.path == "/healthz" || req.path == "/readyz" || req.path == "/livez") {
    res.status = 200;
    res.set_content("ok", "text/plain");
  } else if (req.path == "/version") {
    Reply(res, 200, {{"major", "1"}, {"minor", "30"}, {"gitVersion", "v1.30.0-tessera-fake"}});
  } else {
    // /api/v1/... or /apis/<group>/<version>/...
    std::vector<std::string> parts = SplitPath(req.path);
    Route route;
    size_t i = 0;
    std::string prefix;
    if (parts.size() >= 2 && parts[0] == "api" && parts[1] == "v1") {
      prefix = "/api/v1";
      i = 2;
    } else if (parts.size() >= 3 && parts[0] == "apis") {
      prefix = "/apis/" + parts[1] + "/" + parts[2];
      i = 3;
    }
    bool ok = !prefix.empty();
    if (ok && i + 1 < parts.size() && parts[i] == "namespaces") {
      route.ns = parts[i + 1];
      i += 2;
    }
    if (ok && i < parts.size()) {
      if (parts[i] == "bindings" && prefix == "/api/v1" && !route.ns.empty()) {
        route.kind = FindKind(prefix, "pods");
        route.bindings_collection = true;
      } else {
        route.kind = FindKind(prefix, parts[i]);
      }
      ++i;
    }
    ok = ok && route.kind != nullptr;
    if (ok && !route.kind->namespaced && !route.ns.empty()) ok = false;
    if (ok && i < parts.size()) route.name = parts[i++];
    if (ok && i < parts.size()) route.subresource = parts[i++];
    if (ok && i < parts.size()) ok = false;
    if (!ok) {
      ReplyStatus(res, 404, "NotFound", "the server could not find the requested resource");
    } else {
      if (garbage_watch && req.method == "GET" && route.name.empty() && route.subresource.empty()) {
        ServeWatch(route, req, res, /*garbage=*/true);
      } else {
        Serve(route, req, res, &record);
      }
    }
  }
  record.status = res.status;
  std::lock_guard<std::mutex> lock(mu_);
  LogRequestLocked(std::move(record));
}

void FakeApiServer::Serve(const Route& route, const httplib::Request& req, httplib::Response& res,
                          RequestRecord* record) {
  const Kind& kind = *route.kind;
  if (route.bindings_collection) {
    if (req.method != "POST" || !route.name.empty()) {
      ReplyStatus(res, 405, "MethodNotAllowed", "only POST is allowed on bindings");
      return;
    }
    Json binding = Json::parse(req.body, nullptr, false);
    if (binding.is_discarded() || !binding.is_object()) {
      ReplyStatus(res, 400, "BadRequest", "the Binding body is not a JSON object");
      return;
    }
    Route r = route;
    r.name = MetaString(binding, "name");
    ServeBinding(r, binding, res);
    return;
  }
  if (!route.subresource.empty()) {
    if (route.subresource == "binding" && kind.plural == "pods" && req.method == "POST") {
      Json binding = Json::parse(req.body, nullptr, false);
      if (binding.is_discarded() || !binding.is_object()) {
        ReplyStatus(res, 400, "BadRequest", "the Binding body is not a JSON object");
        return;
      }
      ServeBinding(route, binding, res);
      return;
    }
    if (route.subresource == "status" && kind.has_status) {
      if (req.method == "GET") {
        Route r = route;
        r.subresource.clear();
        Serve(r, req, res, record);
        return;
      }
      if (req.method == "PUT") return ServeUpdate(route, req, res);
      if (req.method == "PATCH") return ServePatch(route, req, res);
    }
    ReplyStatus(res, 404, "NotFound", "the server could not find the requested resource");
    return;
  }
  if (route.name.empty()) {
    if (req.method == "GET") {
      if (record->watch) return ServeWatch(route, req, res, false);
      return ServeList(route, req, res);
    }
    if (req.method == "POST") {
      if (kind.namespaced && route.ns.empty()) {
        ReplyStatus(res, 405, "MethodNotAllowed",
                    "POST to " + kind.plural + " needs a namespace in the path");
        return;
      }
      return ServeCreate(route, req, res);
    }
    ReplyStatus(res, 405, "MethodNotAllowed", req.method + " is not allowed on a collection");
    return;
  }
  if (kind.namespaced && route.ns.empty()) {
    ReplyStatus(res, 404, "NotFound", "the server could not find the requested resource");
    return;
  }
  if (req.method == "GET") {
    std::lock_guard<std::mutex> lock(mu_);
    auto& objs = objects_[kind.plural];
    auto it = objs.find(Key(route.ns, route.name));
    if (it == objs.end()) return NotFound(res, kind, route.name);
    Reply(res, 200, it->second);
    return;
  }
  if (req.method == "PUT") return ServeUpdate(route, req, res);
  if (req.method == "PATCH") return ServePatch(route, req, res);
  if (req.method == "DELETE") return ServeDelete(route, res);
  ReplyStatus(res, 405, "MethodNotAllowed", req.method + " is not allowed here");
}

void FakeApiServer::ServeList(const Route& route, const httplib::Request& req, httplib::Response& res) {
  const Kind& kind = *route.kind;
  WatchState filter;
  if (!ParseSelectors(kind, req, res, filter)) return;
  filter.ns = route.ns;
  // Pagination: `limit` items per page in key order; `continue` is
  // "<list rv>/<last key served>". Unlike etcd, later pages are read from
  // the current objects, not a snapshot at the first page's version (an
  // object created meanwhile under a later key shows up; the list's
  // resourceVersion stays the first page's). A token older than the
  // history answers 410 Expired, as the real server's does after compaction.
  int64_t limit = 0;
  if (req.has_param("limit")) {
    try {
      limit = std::stoll(req.get_param_value("limit"));
    } catch (...) {
      return ReplyStatus(res, 400, "BadRequest", "limit must be an integer");
    }
  }
  uint64_t list_rv = 0;
  std::string after;
  const bool continued = req.has_param("continue");
  if (continued) {
    const std::string token = req.get_param_value("continue");
    const size_t slash = token.find('/');
    if (slash == std::string::npos || !ParseRv(token.substr(0, slash), &list_rv) ||
        slash + 1 >= token.size()) {
      return ReplyStatus(res, 400, "BadRequest", "continue key is not valid: \"" + token + "\"");
    }
    after = token.substr(slash + 1);
  }
  Json list = {{"kind", kind.kind + "List"}, {"apiVersion", kind.api_version}};
  Json items = Json::array();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (continued && list_rv < compacted_rv_) {
      return ReplyStatus(res, 410, "Expired",
                         "The provided continue parameter is too old to display a consistent list result. "
                         "You can start a new list without the continue parameter.");
    }
    if (!continued) list_rv = rv_;
    const auto& objects = objects_[kind.plural];
    auto it = continued ? objects.upper_bound(after) : objects.begin();
    std::string last;
    bool more = false;  // (remainingItemCount, optional, is not sent: counting would read the rest)
    for (; it != objects.end(); ++it) {
      if (!filter.Passes(it->second)) continue;
      if (limit > 0 && static_cast<int64_t>(items.size()) >= limit) {
        more = true;
        break;
      }
      items.push_back(WithoutTypeMeta(it->second));
      last = it->first;
    }
    list["metadata"] = {{"resourceVersion", std::to_string(list_rv)}};
    if (more) list["metadata"]["continue"] = std::to_string(list_rv) + "/" + last;
  }
  list["items"] = std::move(items);
  Reply(res, 200, list);
}

void FakeApiServer::ServeWatch(const Route& route, const httplib::Request& req, httplib::Response& res,
                               bool garbage) {
  const Kind& kind = *route.kind;
  auto state = std::make_shared<WatchState>();
  state->kind = &kind;
  state->ns = route.ns;
  state->garbage = garbage;
  if (!ParseSelectors(kind, req, res, *state)) return;
  state->bookmarks = req.get_param_value("allowWatchBookmarks") == "true";
  // A streaming list (KEP-3157): the current objects as ADDED, then a
  // BOOKMARK annotated k8s.io/initial-events-end. The real server requires
  // resourceVersionMatch=NotOlderThan with it, and refuses
  // resourceVersionMatch on a watch without it; one that predates streaming
  // lists (options.streaming_lists = false) refuses both.
  const bool initial_events = req.get_param_value("sendInitialEvents") == "true";
  const std::string rv_match = req.get_param_value("resourceVersionMatch");
  if (req.has_param("sendInitialEvents") || !rv_match.empty()) {
    if (!options_.streaming_lists) {
      return ReplyStatus(res, 422, "Invalid",
                         "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch");
    }
    if (initial_events && rv_match != "NotOlderThan") {
      return ReplyStatus(res, 422, "Invalid",
                         "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
                         "resourceVersionMatch to NotOlderThan");
    }
    if (initial_events && !state->bookmarks) {
      return ReplyStatus(
          res, 422, "Invalid",
          "allowWatchBookmarks: Forbidden: sendInitialEvents requires allowWatchBookmarks=true");
    }
    if (!initial_events) {
      return ReplyStatus(
          res, 422, "Invalid",
          "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
          "sendInitialEvents is provided");
    }
  }
  int timeout = options_.default_watch_timeout_seconds;
  if (req.has_param("timeoutSeconds")) {
    try {
      timeout = std::stoi(req.get_param_value("timeoutSeconds"));
    } catch (...) {
      return ReplyStatus(res, 400, "BadRequest", "timeoutSeconds must be an integer");
    }
  }
  const auto now = std::chrono::steady_clock::now();
  state->deadline = now + std::chrono::seconds(std::max(timeout, 1));
  state->last_bookmark = now;
  const std::string rv_param = req.get_param_value("resourceVersion");
  {
    std::lock_guard<std::mutex> lock(mu_);
    state->drop_generation = drop_generation_;
    state->bookmark_generation = bookmark_generation_;
    uint64_t start = 0;
    if (rv_param.empty() || rv_param == "0" || initial_events) {
      // "Start at most recent": the current state as ADDED events, then changes.
      // (A streaming list from a given version: this store has only the
      // present, which is never older than asked.) The objects are formatted
      // as they are sent, a chunk at a time (the provider below), so the
      // store is not held for the whole list.
      state->listing = true;
      state->end_with_bookmark = initial_events;
      state->last_rv = rv_;
    } else if (!ParseRv(rv_param, &start)) {
      return ReplyStatus(res, 400, "BadRequest", "invalid resource version: \"" + rv_param + "\"");
    } else if (start < compacted_rv_) {
      const std::string message = TooOldMessage(rv_param, compacted_rv_);
      if (gone_as_http_) return ReplyStatus(res, 410, "Expired", message);
      state->gone = true;
      state->initial.push_back(ExpiredEvent(message));
      state->last_rv = start;
    } else {
      state->last_rv = start;
    }
    ++active_watches_;
  }
  res.status = 200;
  res.set_chunked_content_provider(
      "application/json",
      [this, state](size_t, httplib::DataSink& sink) -> bool {
        auto write_line = [&](const std::string& line) {
          std::string data = line + "\n";
          return sink.write(data.data(), data.size());
        };
        for (const std::string& line : state->initial) {
          if (!write_line(line)) return false;
        }
        state->initial.clear();
        // The events of the history after state->last_rv that concern this
        // watch, as lines; advances last_rv. Needs mu_.
        auto changes_locked = [&](std::vector<std::string>& lines) {
          auto it = std::upper_bound(history_.begin(), history_.end(), state->last_rv,
                                     [](uint64_t rv, const HistoryEvent& e) { return rv < e.rv; });
          for (; it != history_.end(); ++it) {
            state->last_rv = it->rv;
            if (it->plural != state->kind->plural) continue;
            const bool cur = it->type != "DELETED" && state->Passes(it->object);
            const bool old = it->type == "DELETED" ? state->Passes(it->object) : state->Passes(it->prev);
            std::string type;
            Json obj = it->object;
            if (it->type == "DELETED") {
              if (old) type = "DELETED";
            } else if (cur && old) {
              type = "MODIFIED";
            } else if (cur) {
              type = "ADDED";
            } else if (old) {
              // Left the selection: DELETED with the previous content at the new version.
              type = "DELETED";
              obj = it->prev;
              obj["metadata"]["resourceVersion"] = std::to_string(it->rv);
            }
            if (!type.empty()) lines.push_back(Json({{"type", type}, {"object", obj}}).dump());
          }
        };
        // The current objects, kInitialChunk at a time under the lock, each
        // formatted without copying it. Objects changed meanwhile are sent as
        // they are when their chunk is read; the history since the list
        // began is then replayed, so the state the client holds when the
        // list ends (at the BOOKMARK, for a streaming list) is the store's at
        // that version, as a real server's snapshot would be.
        constexpr size_t kInitialChunk = 256;
        while (state->listing) {
          std::vector<std::string> lines;
          bool end = false;
          {
            std::lock_guard<std::mutex> lock(mu_);
            if (stopping_ || drop_generation_ != state->drop_generation) return false;
            const auto& objects = objects_[state->kind->plural];
            auto it = state->cursor ? objects.upper_bound(*state->cursor) : objects.begin();
            for (size_t n = 0; it != objects.end() && n < kInitialChunk; ++it) {
              state->cursor = it->first;
              if (!state->Passes(it->second)) continue;
              lines.push_back("{\"type\":\"ADDED\",\"object\":" + it->second.dump() + "}");
              ++n;
            }
            if (it == objects.end()) {
              state->listing = false;
              if (state->last_rv < compacted_rv_) {
                // The history moved past the list's start while it was read.
                lines.push_back(ExpiredEvent(TooOldMessage(std::to_string(state->last_rv), compacted_rv_)));
                end = true;
              } else {
                changes_locked(lines);
                state->last_rv = std::max(state->last_rv, rv_);
                if (state->end_with_bookmark) {
                  lines.push_back(Json({{"type", "BOOKMARK"},
                                        {"object",
                                         {{"kind", state->kind->kind},
                                          {"apiVersion", state->kind->api_version},
                                          {"metadata",
                                           {{"resourceVersion", std::to_string(state->last_rv)},
                                            {"annotations", {{"k8s.io/initial-events-end", "true"}}}}}}}})
                                      .dump());
                }
              }
            }
          }
          // One write per chunk of objects, not one per line (a send and a
          // chunk header each).
          std::string data;
          for (const std::string& line : lines) data.append(line).push_back('\n');
          if (!data.empty() && !sink.write(data.data(), data.size())) return false;
          if (end) {
            sink.done();
            return true;
          }
        }
        if (state->gone) {
          sink.done();
          return true;
        }
        if (state->garbage) {
          write_line("{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\" this is not json");
          sink.done();
          return true;
        }
        for (;;) {
          std::vector<std::string> lines;
          bool drop = false, end = false;
          {
            std::unique_lock<std::mutex> lock(mu_);
            auto next_bookmark = state->last_bookmark + options_.bookmark_interval;
            auto wake = std::min(state->deadline, next_bookmark);
            cv_.wait_until(lock, wake, [&] {
              return stopping_ || drop_generation_ != state->drop_generation ||
                     bookmark_generation_ != state->bookmark_generation ||
                     (!history_.empty() && history_.back().rv > state->last_rv);
            });
            if (stopping_ || drop_generation_ != state->drop_generation) {
              drop = true;
            } else if (state->last_rv < compacted_rv_) {
              // This watcher fell behind the bounded history.
              lines.push_back(ExpiredEvent(TooOldMessage(std::to_string(state->last_rv), compacted_rv_)));
              end = true;
            } else {
              changes_locked(lines);
              const auto t = std::chrono::steady_clock::now();
              const bool bookmark_due = bookmark_generation_ != state->bookmark_generation ||
                                        t >= state->last_bookmark + options_.bookmark_interval;
              if (state->bookmarks && bookmark_due) {
                state->last_rv = std::max(state->last_rv, rv_);
                Json bm = {{"type", "BOOKMARK"},
                           {"object",
                            {{"kind", state->kind->kind},
                             {"apiVersion", state->kind->api_version},
                             {"metadata", {{"resourceVersion", std::to_string(state->last_rv)}}}}}};
                lines.push_back(bm.dump());
              }
              if (bookmark_due) {
                state->last_bookmark = t;
                state->bookmark_generation = bookmark_generation_;
              }
              if (t >= state->deadline) end = true;
            }
          }
          if (drop) return false;  // abrupt end, like a lost connection
          for (const std::string& line : lines) {
            if (!write_line(line)) return false;
          }
          if (end) {
            sink.done();
            return true;
          }
        }
      },
      [this](bool) {
        std::lock_guard<std::mutex> lock(mu_);
        --active_watches_;
      });
}

namespace {

// ResourceQuota admission, as kube-apiserver runs it after the mutating
// webhooks: a pod whose requests would take a namespace's usage over a
// quota's spec.hard is refused with 403 Forbidden,
//   pods "p" is forbidden: exceeded quota: <name>, requested: <r>=<v>, used: <r>=<v>, limited: <r>=<v>
// naming the first quota (by name) it exceeds and only the resources it
// exceeds, sorted. A pod's request of a resource is, per container, its
// requests entry or else its limits entry (the API server's defaulting),
// summed over the app containers and at least the largest init container's.
// Counted: pods, count/pods, cpu, memory, requests.* and limits.* of cpu and
// memory, and extended resources as requests.<name> (the only form quota
// takes for them). Used is what the namespace's pods that are not
// Succeeded/Failed request now (what the quota controller converges to);
// status.used is not written. Quantities are decimal with the usual
// suffixes; sums are shown in whole units or milli ("500m"), not in the
// binary suffix a real server may keep. Scopes are not supported: such a
// quota is refused at creation.
using Milli = long double;  // milli-units; exact for the sizes tests use

std::optional<Milli> ParseQuantityMilli(const std::string& text) {
  static const std::vector<std::pair<std::string, Milli>> kSuffixes = {
      {"Ki", 1024.0L}, {"Mi", 1048576.0L}, {"Gi", 1073741824.0L}, {"Ti", 1099511627776.0L},
      {"m", 1e-3L},    {"k", 1e3L},        {"M", 1e6L},           {"G", 1e9L},
      {"T", 1e12L},    {"P", 1e15L},       {"E", 1e18L}};
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
    ++end;
  if (end == 0) return std::nullopt;
  Milli value = 0;
  try {
    value = std::stold(text.substr(0, end));
  } catch (...) {
    return std::nullopt;
  }
  const std::string suffix = text.substr(end);
  Milli scale = 1;
  if (!suffix.empty()) {
    auto it =
        std::find_if(kSuffixes.begin(), kSuffixes.end(), [&](const auto& s) { return s.first == suffix; });
    if (it == kSuffixes.end()) return std::nullopt;
    scale = it->second;
  }
  return std::ceil(value * scale * 1000.0L);
}

std::string FormatMilli(Milli milli) {
  const long long m = static_cast<long long>(milli);
  return m % 1000 == 0 ? std::to_string(m / 1000) : std::to_string(m) + "m";
}

bool IsExtendedResource(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos) return false;
  const std::string domain = name.substr(0, slash);
  return domain != "kubernetes.io" && !domain.ends_with(".kubernetes.io") && !name.starts_with("requests.") &&
         !name.starts_with("limits.");
}

// The quota names a pod's resource usage is counted under.
std::map<std::string, Milli> PodQuotaUsage(const Json& pod) {
  std::map<std::string, Milli> requests, limits;
  auto of = [](const Json& container, const char* field) {
    std::map<std::string, Milli> out;
    if (!container.is_object() || !container.contains("resources") || !container["resources"].is_object())
      return out;
    const Json& r = container["resources"];
    if (r.contains(field) && r[field].is_object()) {
      for (const auto& [name, v] : r[field].items()) {
        if (auto q = v.is_string() ? ParseQuantityMilli(v.get<std::string>()) : std::nullopt) out[name] = *q;
      }
    }
    return out;
  };
  auto effective = [&](const Json& c, std::map<std::string, Milli>& req, std::map<std::string, Milli>& lim) {
    lim = of(c, "limits");
    req = of(c, "requests");
    for (const auto& [name, v] : lim) req.emplace(name, v);  // defaulting: requests from limits
  };
  auto containers = [&pod](const char* list) -> std::vector<Json> {
    if (!pod.contains("spec") || !pod["spec"].is_object() || !pod["spec"].contains(list) ||
        !pod["spec"][list].is_array())
      return {};
    return pod["spec"][list].get<std::vector<Json>>();
  };
  for (const Json& c : containers("containers")) {
    std::map<std::string, Milli> req, lim;
    effective(c, req, lim);
    for (const auto& [n, v] : req) requests[n] += v;
    for (const auto& [n, v] : lim) limits[n] += v;
  }
  for (const Json& c : containers("initContainers")) {
    std::map<std::string, Milli> req, lim;
    effective(c, req, lim);
    for (const auto& [n, v] : req) requests[n] = std::max(requests[n], v);
    for (const auto& [n, v] : lim) limits[n] = std::max(limits[n], v);
  }
  std::map<std::string, Milli> usage = {{"pods", 1000}, {"count/pods", 1000}};
  for (const auto& [n, v] : requests) {
    if (n == "cpu" || n == "memory" || n == "ephemeral-storage") {
      usage[n] += v;
      usage["requests." + n] += v;
    } else if (IsExtendedResource(n)) {
      usage["requests." + n] += v;
    }
  }
  for (const auto& [n, v] : limits) {
    if (n == "cpu" || n == "memory" || n == "ephemeral-storage") usage["limits." + n] += v;
  }
  return usage;
}

bool PodIsTerminal(const Json& pod) {
  if (!pod.contains("status") || !pod["status"].is_object()) return false;
  const std::string phase = pod["status"].value("phase", "");
  return phase == "Succeeded" || phase == "Failed";
}

// spec.hard of a ResourceQuota (an empty object when it has none).
Json HardOf(const Json& quota) {
  if (!quota.contains("spec") || !quota["spec"].is_object() || !quota["spec"].contains("hard") ||
      !quota["spec"]["hard"].is_object())
    return Json::object();
  return quota["spec"]["hard"];
}

// Why a new ResourceQuota cannot be stored ("" = it can).
std::string QuotaInvalid(const Json& quota) {
  if (quota.contains("spec") && quota["spec"].is_object() &&
      (quota["spec"].contains("scopes") || quota["spec"].contains("scopeSelector"))) {
    return "quota scopes are not supported by the API-server stand-in";
  }
  const Json hard = HardOf(quota);
  for (const auto& [name, v] : hard.items()) {
    if (IsExtendedResource(name) || (name.starts_with("limits.") && IsExtendedResource(name.substr(7)))) {
      return "spec.hard[" + name + "]: Invalid value: \"" + name +
             "\": must be a standard resource for quota";
    }
    if (!v.is_string() || !ParseQuantityMilli(v.get<std::string>())) {
      return "spec.hard[" + name + "]: Invalid value: quantities must match the regular expression";
    }
  }
  return "";
}

// The refusal of `pod` (to be created in a namespace whose quotas are
// `quotas` and pods `pods`, keyed "ns/name"), or nullopt when it is admitted.
std::optional<std::pair<int, Json>> QuotaRefusal(const std::map<std::string, Json>& quotas,
                                                 const std::map<std::string, Json>& pods,
                                                 const std::string& ns, const Json& pod) {
  const std::string prefix = ns + "/";
  const std::map<std::string, Milli> requested = PodQuotaUsage(pod);
  for (auto q = quotas.lower_bound(prefix); q != quotas.end() && q->first.starts_with(prefix); ++q) {
    const Json hard = HardOf(q->second);
    std::map<std::string, Milli> used;
    for (auto p = pods.lower_bound(prefix); p != pods.end() && p->first.starts_with(prefix); ++p) {
      if (PodIsTerminal(p->second)) continue;
      for (const auto& [n, v] : PodQuotaUsage(p->second)) used[n] += v;
    }
    std::string req_text, used_text, hard_text;
    for (const auto& [name, limit] : hard.items()) {  // sorted by name
      auto r = requested.find(name);
      if (r == requested.end() || r->second == 0) continue;
      const Milli limited = ParseQuantityMilli(limit.get<std::string>()).value_or(0);
      if (used[name] + r->second <= limited) continue;
      const std::string sep = req_text.empty() ? "" : ",";
      req_text += sep + name + "=" + FormatMilli(r->second);
      used_text += sep + name + "=" + FormatMilli(used[name]);
      hard_text += sep + name + "=" + FormatMilli(limited);
    }
    if (req_text.empty()) continue;
    const std::string name = MetaString(pod, "name");
    return std::pair<int, Json>{
        403,
        StatusBody(403, "Forbidden",
                   "pods \"" + name + "\" is forbidden: exceeded quota: " + MetaString(q->second, "name") +
                       ", requested: " + req_text + ", used: " + used_text + ", limited: " + hard_text,
                   {{"name", name}, {"kind", "pods"}})};
  }
  return std::nullopt;
}

}  // namespace

std::pair<int, Json> FakeApiServer::CreateLocked(const Kind& kind, const std::string& ns, Json object) {
  if (!object.is_object()) return {400, StatusBody(400, "BadRequest", "the body is not a JSON object")};
  if (object.contains("kind") && object["kind"] != kind.kind) {
    return {400, StatusBody(400, "BadRequest",
                            "the body kind " + object["kind"].dump() + " does not match " + kind.kind)};
  }
  if (!object.contains("metadata") || !object["metadata"].is_object()) object["metadata"] = Json::object();
  Json& meta = object["metadata"];
  std::string name = MetaString(object, "name");
  if (name.empty() && meta.contains("generateName") && meta["generateName"].is_string()) {
    static const char* alphabet = "bcdfghjklmnpqrstvwxz2456789";
    std::mt19937 rng(static_cast<unsigned>(++uid_counter_ * 7919 + rv_));
    name = meta["generateName"].get<std::string>();
    for (int i = 0; i < 5; ++i) name += alphabet[rng() % 27];
    meta["name"] = name;
  }
  if (name.empty()) {
    return {422, StatusBody(422, "Invalid",
                            kind.kind + " is invalid: metadata.name: Required value: name or "
                                        "generateName is required")};
  }
  if (kind.namespaced) {
    const std::string body_ns = MetaString(object, "namespace");
    if (!body_ns.empty() && body_ns != ns) {
      return {400, StatusBody(400, "BadRequest",
                              "the namespace of the provided object does not match the namespace sent on the "
                              "request")};
    }
    meta["namespace"] = ns;
  } else {
    meta.erase("namespace");
  }
  if (!MetaString(object, "resourceVersion").empty()) {
    return {400, StatusBody(400, "BadRequest", "resourceVersion should not be set on objects to be created")};
  }
  if (kind.plural == "resourcequotas") {
    if (std::string why = QuotaInvalid(object); !why.empty()) {
      return {422, StatusBody(422, "Invalid", "ResourceQuota \"" + name + "\" is invalid: " + why)};
    }
  }
  if (kind.plural == "pods") {
    if (auto refused = QuotaRefusal(objects_["resourcequotas"], objects_["pods"], ns, object))
      return *refused;
  }
  auto& objs = objects_[kind.plural];
  const std::string key = Key(kind.namespaced ? ns : "", name);
  if (objs.count(key)) {
    return {409, StatusBody(409, "AlreadyExists", kind.plural + " \"" + name + "\" already exists",
                            {{"name", name}, {"kind", kind.plural}})};
  }
  object["kind"] = kind.kind;
  object["apiVersion"] = kind.api_version;
  meta["uid"] = "00000000-0000-4000-8000-" + [&] {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%012llu", static_cast<unsigned long long>(++uid_counter_));
    return std::string(buf);
  }();
  meta["creationTimestamp"] = Now3339();
  if (kind.plural == "pods") {
    // The real server resets a new pod's status.
    object["status"] = {{"phase", "Pending"}};
  } else if (kind.plural == "resourceclaims") {
    // So does it a new claim's: allocation and reservedFor go through /status.
    object.erase("status");
  }
  meta["resourceVersion"] = std::to_string(NextRvLocked());
  objs[key] = object;
  RecordEventLocked(kind.plural, "ADDED", object, nullptr);
  return {201, object};
}

void FakeApiServer::ServeCreate(const Route& route, const httplib::Request& req, httplib::Response& res) {
  Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded()) return ReplyStatus(res, 400, "BadRequest", "the request body is not valid JSON");
  std::lock_guard<std::mutex> lock(mu_);
  auto [status, out] = CreateLocked(*route.kind, route.ns, std::move(body));
  Reply(res, status, out);
}

std::pair<int, Json> FakeApiServer::ReplaceLocked(const Kind& kind, const std::string& ns,
                                                  const std::string& name, const std::string& subresource,
                                                  Json object) {
  if (!object.is_object()) return {400, StatusBody(400, "BadRequest", "the body is not a JSON object")};
  auto& objs = objects_[kind.plural];
  auto it = objs.find(Key(ns, name));
  if (it == objs.end()) {
    return {404, StatusBody(404, "NotFound", kind.plural + " \"" + name + "\" not found",
                            {{"name", name}, {"kind", kind.plural}})};
  }
  const Json old = it->second;
  const std::string body_name = MetaString(object, "name");
  if (body_name != name) {
    return {400, StatusBody(400, "BadRequest",
                            "the name of the object (" + body_name +
                                ") does not match the name on the URL (" + name + ")")};
  }
  const std::string rv = MetaString(object, "resourceVersion");
  if (!rv.empty() && rv != MetaString(old, "resourceVersion")) {
    return {409, StatusBody(409, "Conflict",
                            "Operation cannot be fulfilled on " + QualifiedPlural(kind) + " \"" + name +
                                "\": the object has been modified; please apply your changes to the latest "
                                "version and try again",
                            {{"name", name}, {"kind", kind.plural}})};
  }
  Json updated;
  if (subresource == "status") {
    updated = old;
    if (object.contains("status")) updated["status"] = object["status"];
  } else {
    updated = object;
    if (kind.has_status) {
      if (old.contains("status")) {
        updated["status"] = old["status"];
      } else {
        updated.erase("status");
      }
    }
  }
  updated["kind"] = kind.kind;
  updated["apiVersion"] = kind.api_version;
  Json& meta = updated["metadata"];
  for (const char* f : {"name", "namespace", "uid", "creationTimestamp"}) {
    if (old["metadata"].contains(f)) {
      meta[f] = old["metadata"][f];
    } else {
      meta.erase(f);
    }
  }
  if (updated == Json(old)) return {200, old};  // no-op updates do not bump the version
  meta["resourceVersion"] = std::to_string(NextRvLocked());
  it->second = updated;
  RecordEventLocked(kind.plural, "MODIFIED", updated, old);
  return {200, updated};
}

void FakeApiServer::ServeUpdate(const Route& route, const httplib::Request& req, httplib::Response& res) {
  Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded()) return ReplyStatus(res, 400, "BadRequest", "the request body is not valid JSON");
  std::lock_guard<std::mutex> lock(mu_);
  auto [status, out] = ReplaceLocked(*route.kind, route.ns, route.name, route.subresource, std::move(body));
  Reply(res, status, out);
}

void FakeApiServer::ServePatch(const Route& route, const httplib::Request& req, httplib::Response& res) {
  const std::string ct = req.get_header_value("Content-Type");
  if (ct.rfind("application/merge-patch+json", 0) != 0) {
    return ReplyStatus(res, 415, "UnsupportedMediaType",
                       "the body of the request was in an unknown format - accepted media types include: "
                       "application/merge-patch+json (this stand-in)");
  }
  Json patch = Json::parse(req.body, nullptr, false);
  if (patch.is_discarded() || !patch.is_object()) {
    return ReplyStatus(res, 400, "BadRequest", "the patch is not a JSON object");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto& objs = objects_[route.kind->plural];
  auto it = objs.find(Key(route.ns, route.name));
  if (it == objs.end()) return NotFound(res, *route.kind, route.name);
  // The patched object carries the current version unless the patch names one
  // (then it is a precondition, checked by the replace).
  Json base = it->second;
  Json patched = ApplyMergePatch(base, patch);
  if (!patched.is_object()) return ReplyStatus(res, 422, "Invalid", "the patched object is not an object");
  if (!patched.contains("metadata") || !patched["metadata"].is_object()) patched["metadata"] = Json::object();
  patched["metadata"]["name"] = route.name;
  auto [status, out] =
      ReplaceLocked(*route.kind, route.ns, route.name, route.subresource, std::move(patched));
  Reply(res, status, out);
}

std::optional<Json> FakeApiServer::DeleteLocked(const std::string& plural, const std::string& ns,
                                                const std::string& name) {
  auto& objs = objects_[plural];
  auto it = objs.find(Key(ns, name));
  if (it == objs.end()) return std::nullopt;
  Json last = it->second;
  objs.erase(it);
  last["metadata"]["resourceVersion"] = std::to_string(NextRvLocked());
  RecordEventLocked(plural, "DELETED", last, nullptr);
  return last;
}

tessera::Status FakeApiServer::DeleteObject(const std::string& plural, const std::string& ns,
                                            const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!DeleteLocked(plural, ns, name))
    return tessera::Error{"fake apiserver: no " + plural + " " + ns + "/" + name};
  return tessera::Status::Ok();
}

void FakeApiServer::ServeDelete(const Route& route, httplib::Response& res) {
  std::lock_guard<std::mutex> lock(mu_);
  auto last = DeleteLocked(route.kind->plural, route.ns, route.name);
  if (!last) return NotFound(res, *route.kind, route.name);
  Reply(res, 200, *last);
}

void FakeApiServer::ServeBinding(const Route& route, const Json& binding, httplib::Response& res) {
  if (binding.contains("kind") && binding["kind"] != "Binding") {
    return ReplyStatus(res, 400, "BadRequest", "the body kind must be Binding");
  }
  const std::string binding_name = MetaString(binding, "name");
  if (!binding_name.empty() && binding_name != route.name) {
    return ReplyStatus(
        res, 400, "BadRequest",
        "the name of the Binding (" + binding_name + ") does not match the pod (" + route.name + ")");
  }
  std::string node;
  if (binding.contains("target") && binding["target"].is_object() && binding["target"].contains("name") &&
      binding["target"]["name"].is_string()) {
    node = binding["target"]["name"].get<std::string>();
  }
  if (node.empty()) {
    return ReplyStatus(res, 422, "Invalid", "Binding is invalid: target.name: Required value");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto& objs = objects_["pods"];
  auto it = objs.find(Key(route.ns, route.name));
  if (it == objs.end()) return NotFound(res, *route.kind, route.name);
  const Json old = it->second;
  const std::string current = old.contains("spec") && old["spec"].is_object() &&
                                      old["spec"].contains("nodeName") && old["spec"]["nodeName"].is_string()
                                  ? old["spec"]["nodeName"].get<std::string>()
                                  : "";
  if (!current.empty()) {
    return ReplyStatus(res, 409, "Conflict",
                       "Operation cannot be fulfilled on pods/binding \"" + route.name + "\": pod " +
                           route.name + " is already assigned to node \"" + current + "\"",
                       {{"name", route.name}, {"kind", "pods/binding"}});
  }
  const std::string precondition = MetaString(binding, "resourceVersion");
  if (!precondition.empty() && precondition != MetaString(old, "resourceVersion")) {
    return ReplyStatus(res, 409, "Conflict",
                       "the pod has been modified; the Binding's resourceVersion is stale");
  }
  Json pod = old;
  pod["spec"]["nodeName"] = node;
  if (binding.contains("metadata") && binding["metadata"].contains("annotations") &&
      binding["metadata"]["annotations"].is_object()) {
    for (const auto& [k, v] : binding["metadata"]["annotations"].items()) {
      pod["metadata"]["annotations"][k] = v;
    }
  }
  // Like the real server, record that the pod was scheduled.
  Json& conditions = pod["status"]["conditions"];
  if (!conditions.is_array()) conditions = Json::array();
  Json condition = {{"type", "PodScheduled"}, {"status", "True"}, {"lastTransitionTime", Now3339()}};
  bool replaced = false;
  for (Json& c : conditions) {
    if (c.value("type", "") == "PodScheduled") {
      c = condition;
      replaced = true;
    }
  }
  if (!replaced) conditions.push_back(condition);
  pod["metadata"]["resourceVersion"] = std::to_string(NextRvLocked());
  it->second = pod;
  RecordEventLocked("pods", "MODIFIED", pod, old);
  Reply(res, 201,
        {{"kind", "Status"},
         {"apiVersion", "v1"},
         {"metadata", Json::object()},
         {"status", "Success"},
         {"code", 201}});
}

}  // namespace tessera::testing
