#include "kube/client.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <optional>
#include <string_view>

namespace tessera::kube {
namespace {

constexpr size_t kMaxBodyInMessage = 200;

std::string Excerpt(const std::string& body) {
  std::string s = body.substr(0, kMaxBodyInMessage);
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (body.size() > kMaxBodyInMessage) s += "...";
  return s;
}

const char* StatusText(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

ApiError ErrorFromStatusObject(const std::string& what, int status, const Json& st) {
  ApiError err;
  err.http_status = status;
  if (st.contains("reason") && st["reason"].is_string()) err.reason = st["reason"].get<std::string>();
  std::string message;
  if (st.contains("message") && st["message"].is_string()) message = st["message"].get<std::string>();
  err.message = what + ": " + std::to_string(status);
  if (const char* text = StatusText(status); text[0] != '\0') err.message += std::string(" ") + text;
  if (!message.empty()) err.message += ": " + message;
  return err;
}

void AddQuery(std::string* path, const std::string& key, const std::string& value) {
  *path += (path->find('?') == std::string::npos ? '?' : '&');
  *path += key + "=" + UrlEncode(value);
}

}  // namespace

const ResourceType resources::kPods{"/api/v1", "v1", "Pod", "pods", true};
const ResourceType resources::kNodes{"/api/v1", "v1", "Node", "nodes", false};
const ResourceType resources::kLeases{"/apis/coordination.k8s.io/v1", "coordination.k8s.io/v1", "Lease",
                                      "leases", true};
const ResourceType resources::kEvents{"/api/v1", "v1", "Event", "events", true};

std::string ResourceType::CollectionPath(const std::string& ns) const {
  if (namespaced && !ns.empty()) return api_prefix + "/namespaces/" + UrlEncode(ns) + "/" + plural;
  return api_prefix + "/" + plural;
}

std::string ResourceType::ObjectPath(const std::string& ns, const std::string& name) const {
  return CollectionPath(ns) + "/" + UrlEncode(name);
}

namespace {

// The API server's spelling of each watch event type, indexed by
// WatchEvent::Type: printed and parsed from this one list.
constexpr std::string_view kWatchEventTypeNames[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"};
static_assert(std::size(kWatchEventTypeNames) == static_cast<size_t>(WatchEvent::Type::kBookmark) + 1);

}  // namespace

const char* WatchEventTypeName(WatchEvent::Type type) {
  const auto i = static_cast<size_t>(type);
  return i < std::size(kWatchEventTypeNames) ? kWatchEventTypeNames[i].data() : "?";
}

std::string UrlEncode(const std::string& value) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

ApiError ErrorFromResponse(const std::string& what, int status, const std::string& body) {
  Json st = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (st.is_object() && st.value("kind", "") == "Status") return ErrorFromStatusObject(what, status, st);
  ApiError err;
  err.http_status = status;
  err.message = what + ": " + std::to_string(status);
  if (const char* text = StatusText(status); text[0] != '\0') err.message += std::string(" ") + text;
  if (!body.empty()) err.message += ": " + Excerpt(body);
  return err;
}

namespace {

// metadata.<field> when it is a string, else "".
std::string MetadataString(const Json& o, const char* field) {
  if (!o.is_object()) return "";
  auto m = o.find("metadata");
  if (m == o.end() || !m->is_object()) return "";
  auto v = m->find(field);
  return v != m->end() && v->is_string() ? v->get<std::string>() : "";
}

}  // namespace

std::string NameOf(const Json& o) {
  return MetadataString(o, "name");
}

std::string NamespaceOf(const Json& o) {
  return MetadataString(o, "namespace");
}

std::string ResourceVersionOf(const Json& o) {
  return MetadataString(o, "resourceVersion");
}

std::string UidOf(const Json& o) {
  return MetadataString(o, "uid");
}

std::string AnnotationOf(const Json& o, std::string_view key) {
  if (!o.is_object()) return "";
  auto m = o.find("metadata");
  if (m == o.end() || !m->is_object()) return "";
  auto annotations = m->find("annotations");
  if (annotations == m->end() || !annotations->is_object()) return "";
  auto v = annotations->find(std::string(key));
  return v != annotations->end() && v->is_string() ? v->get<std::string>() : "";
}

bool IsPodTerminal(const Json& pod) {
  if (!pod.is_object()) return false;
  auto status = pod.find("status");
  if (status == pod.end() || !status->is_object()) return false;
  auto phase = status->find("phase");
  if (phase == status->end() || !phase->is_string()) return false;
  const auto& p = phase->get_ref<const std::string&>();
  return p == "Succeeded" || p == "Failed";
}

std::string KeyOf(const Json& o) {
  const std::string ns = NamespaceOf(o);
  return ns.empty() ? NameOf(o) : ns + "/" + NameOf(o);
}

Client::Client(std::shared_ptr<Transport> transport, ClientOptions options)
    : transport_(std::move(transport)),
      options_(options),
      limiter_(options.qps, options.burst, OrRealClock(options.clock)) {}

ApiResult<Json> Client::Call(HttpRequest request, const FieldSelection* body_fields) {
  if (request.timeout.count() == 0) request.timeout = options_.timeout;
  limiter_.Wait();
  const std::string what = request.method + " " + request.path;
  TESSERA_ASSIGN_OR_RETURN(const HttpResponse r, transport_->Do(request));
  if (r.status < 200 || r.status >= 300) return ErrorFromResponse(what, r.status, r.body);
  std::optional<Json> selected;
  if (body_fields) selected = ParseSelected(r.body, *body_fields);
  Json body = selected ? std::move(*selected) : Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return ApiError{r.status, "InvalidResponse",
                    what + ": the API server answered " + std::to_string(r.status) +
                        " with a body that is not a JSON object: " + Excerpt(r.body)};
  }
  return body;
}

ApiResult<Json> Client::Get(const ResourceType& type, const std::string& ns, const std::string& name,
                            std::chrono::milliseconds timeout) {
  HttpRequest req;
  req.method = "GET";
  req.path = type.ObjectPath(ns, name);
  req.timeout = timeout;
  return Call(std::move(req));
}

ApiResult<ObjectList> Client::List(const ResourceType& type, const std::string& ns,
                                   const ListOptions& options, const std::atomic<bool>* cancel) {
  HttpRequest req;
  req.cancel = cancel;
  req.method = "GET";
  req.path = type.CollectionPath(ns);
  if (!options.label_selector.empty()) AddQuery(&req.path, "labelSelector", options.label_selector);
  if (!options.field_selector.empty()) AddQuery(&req.path, "fieldSelector", options.field_selector);
  if (!options.resource_version.empty()) AddQuery(&req.path, "resourceVersion", options.resource_version);
  if (options.limit > 0) AddQuery(&req.path, "limit", std::to_string(options.limit));
  if (!options.continue_token.empty()) AddQuery(&req.path, "continue", options.continue_token);
  const std::string what = "GET " + req.path;
  std::optional<FieldSelection> body_fields;
  if (options.item_fields) {
    body_fields.emplace();
    body_fields->Member("metadata");
    body_fields->Member("items") = *options.item_fields;
  }
  TESSERA_ASSIGN_OR_RETURN(Json j, Call(std::move(req), body_fields ? &*body_fields : nullptr));
  ObjectList list;
  if (!j.contains("items") || !(j["items"].is_array() || j["items"].is_null())) {
    return ApiError{200, "InvalidResponse", what + ": the list answer has no \"items\" array"};
  }
  list.resource_version = ResourceVersionOf(j);
  if (auto meta = j.find("metadata"); meta != j.end() && meta->is_object()) {
    if (auto c = meta->find("continue"); c != meta->end() && c->is_string()) list.continue_token = *c;
  }
  if (j["items"].is_array()) {
    list.items.reserve(j["items"].size());
    for (Json& item : j["items"]) {
      if (!item.is_object()) return ApiError{200, "InvalidResponse", what + ": a list item is not an object"};
      Json copy = std::move(item);
      // List items come without kind/apiVersion on the wire; restore them.
      if (!copy.contains("kind")) copy["kind"] = type.kind;
      if (!copy.contains("apiVersion")) copy["apiVersion"] = type.api_version;
      list.items.push_back(std::move(copy));
    }
  }
  return list;
}

ApiResult<Json> Client::Create(const ResourceType& type, const std::string& ns, Json object,
                               std::chrono::milliseconds timeout) {
  if (!object.is_object())
    return ApiError{0, "BadRequest", "create " + type.plural + ": object is not a JSON object"};
  if (!object.contains("kind")) object["kind"] = type.kind;
  if (!object.contains("apiVersion")) object["apiVersion"] = type.api_version;
  HttpRequest req;
  req.method = "POST";
  req.path = type.CollectionPath(ns);
  req.body = object.dump();
  req.content_type = "application/json";
  req.timeout = timeout;
  return Call(std::move(req));
}

ApiResult<Json> Client::Update(const ResourceType& type, const std::string& ns, Json object,
                               std::chrono::milliseconds timeout) {
  const std::string name = NameOf(object);
  if (name.empty())
    return ApiError{0, "BadRequest", "update " + type.plural + ": object has no metadata.name"};
  if (!object.contains("kind")) object["kind"] = type.kind;
  if (!object.contains("apiVersion")) object["apiVersion"] = type.api_version;
  HttpRequest req;
  req.method = "PUT";
  req.path = type.ObjectPath(ns, name);
  req.body = object.dump();
  req.content_type = "application/json";
  req.timeout = timeout;
  return Call(std::move(req));
}

ApiResult<Json> Client::UpdateStatus(const ResourceType& type, const std::string& ns, Json object) {
  const std::string name = NameOf(object);
  if (name.empty()) return ApiError{0, "BadRequest", "update status " + type.plural + ": object has no name"};
  if (!object.contains("kind")) object["kind"] = type.kind;
  if (!object.contains("apiVersion")) object["apiVersion"] = type.api_version;
  HttpRequest req;
  req.method = "PUT";
  req.path = type.ObjectPath(ns, name) + "/status";
  req.body = object.dump();
  req.content_type = "application/json";
  return Call(std::move(req));
}

ApiResult<Json> Client::MergePatch(const ResourceType& type, const std::string& ns, const std::string& name,
                                   const Json& patch, const std::string& subresource) {
  HttpRequest req;
  req.method = "PATCH";
  req.path = type.ObjectPath(ns, name) + (subresource.empty() ? "" : "/" + subresource);
  req.body = patch.dump();
  req.content_type = "application/merge-patch+json";
  return Call(std::move(req));
}

ApiStatus Client::Delete(const ResourceType& type, const std::string& ns, const std::string& name) {
  HttpRequest req;
  req.method = "DELETE";
  req.path = type.ObjectPath(ns, name);
  TESSERA_RETURN_IF_ERROR(Call(std::move(req)));
  return ApiStatus::Ok();
}

ApiResult<Json> Client::CreateSubresource(const ResourceType& type, const std::string& ns,
                                          const std::string& name, const std::string& subresource,
                                          const Json& body) {
  HttpRequest req;
  req.method = "POST";
  req.path = type.ObjectPath(ns, name) + "/" + subresource;
  req.body = body.dump();
  req.content_type = "application/json";
  return Call(std::move(req));
}

ApiStatus Client::Watch(const ResourceType& type, const std::string& ns, const WatchOptions& options,
                        const std::function<bool(WatchEvent&&)>& on_event, const std::atomic<bool>* cancel) {
  HttpRequest req;
  req.method = "GET";
  req.path = type.CollectionPath(ns) + "?watch=true";
  if (!options.label_selector.empty()) AddQuery(&req.path, "labelSelector", options.label_selector);
  if (!options.field_selector.empty()) AddQuery(&req.path, "fieldSelector", options.field_selector);
  if (!options.resource_version.empty()) AddQuery(&req.path, "resourceVersion", options.resource_version);
  if (options.allow_bookmarks || options.send_initial_events)
    AddQuery(&req.path, "allowWatchBookmarks", "true");
  if (options.send_initial_events) {
    AddQuery(&req.path, "sendInitialEvents", "true");
    AddQuery(&req.path, "resourceVersionMatch", "NotOlderThan");
  }
  if (options.timeout_seconds > 0)
    AddQuery(&req.path, "timeoutSeconds", std::to_string(options.timeout_seconds));
  // The server ends the watch after timeoutSeconds; allow it a margin before
  // the client gives up on its own.
  req.timeout = options.timeout_seconds > 0
                    ? std::chrono::milliseconds((options.timeout_seconds + 30) * 1000LL)
                    : std::chrono::milliseconds(0);
  req.cancel = cancel;
  const std::string what = "GET " + req.path;

  limiter_.Wait();
  ApiError failure;
  bool failed = false;
  std::optional<FieldSelection> event_fields;
  if (options.object_fields) {
    event_fields.emplace();
    event_fields->Member("type");
    event_fields->Member("object") = *options.object_fields;
  }
  auto on_line = [&](std::string_view line) -> bool {
    if (event_fields) {
      // The common event, decoded selectively; anything else below, whole.
      if (std::optional<Json> j = ParseSelected(line, *event_fields); j && j->is_object()) {
        auto event_type = j->find("type");
        auto object = j->find("object");
        if (event_type != j->end() && event_type->is_string() && object != j->end() && object->is_object() &&
            !NameOf(*object).empty()) {
          const std::string& t = event_type->get_ref<const std::string&>();
          const auto* known = std::find(std::begin(kWatchEventTypeNames), std::end(kWatchEventTypeNames), t);
          if (known != std::end(kWatchEventTypeNames) && *known != "BOOKMARK") {
            WatchEvent ev;
            ev.type = static_cast<WatchEvent::Type>(known - std::begin(kWatchEventTypeNames));
            ev.object = std::move(*object);
            return on_event(std::move(ev));
          }
        }
      }
    }
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string() ||
        !j.contains("object") || !j["object"].is_object()) {
      failure = ApiError{
          200, "InvalidResponse",
          what + ": the watch stream sent a line that is not a watch event: " + Excerpt(std::string(line))};
      failed = true;
      return false;
    }
    const std::string t = j["type"].get<std::string>();
    WatchEvent ev;
    const auto* known = std::find(std::begin(kWatchEventTypeNames), std::end(kWatchEventTypeNames), t);
    if (known != std::end(kWatchEventTypeNames)) {
      ev.type = static_cast<WatchEvent::Type>(known - std::begin(kWatchEventTypeNames));
    } else if (t == "ERROR") {
      const Json& st = j["object"];
      const int code = st.contains("code") && st["code"].is_number_integer() ? st["code"].get<int>() : 500;
      failure = ErrorFromStatusObject(what + " (ERROR event)", code, st);
      failed = true;
      return false;
    } else {
      failure = ApiError{200, "InvalidResponse", what + ": unknown watch event type \"" + t + "\""};
      failed = true;
      return false;
    }
    if (ev.type != WatchEvent::Type::kBookmark && NameOf(j["object"]).empty()) {
      failure =
          ApiError{200, "InvalidResponse", what + ": a " + t + " event carries an object without a name"};
      failed = true;
      return false;
    }
    ev.object = std::move(j["object"]);
    if (!on_event(std::move(ev))) return false;
    return true;
  };
  auto response = transport_->Stream(req, on_line);
  if (failed) return failure;
  if (!response.ok()) return response.error();
  if (response->status < 200 || response->status >= 300) {
    return ErrorFromResponse(what, response->status, response->body);
  }
  return ApiStatus::Ok();
}

}  // namespace tessera::kube
