// Transport: the narrow seam between the Kubernetes client and HTTP. The real
// implementation is CurlTransport; tests may substitute their own.
//
// A Transport answers with an HttpResponse for every request the server
// answered, whatever its status code; only failures to get an answer at all
// (connection refused, timeout, TLS error, cancelled) are ApiErrors with
// http_status == 0.
//
// Thread-safety: implementations must allow concurrent Do()/Stream() calls.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "kube/api_error.h"

namespace tessera::kube {

struct HttpRequest {
  std::string method = "GET";
  std::string path;  // absolute path with query, e.g. "/api/v1/pods?watch=true"
  std::string body;
  std::string content_type;  // sent when non-empty
  std::string accept = "application/json";
  // Whole-request deadline; zero means none (Client fills in its default for
  // ordinary requests; a watch is ended by the server after timeoutSeconds).
  std::chrono::milliseconds timeout{0};
  // For streams: give up when no byte arrives for this long (0: never).
  std::chrono::milliseconds idle_timeout{0};
  // Polled while waiting (streams and ordinary requests); when it becomes
  // true the request stops and fails with reason "Cancelled".
  const std::atomic<bool>* cancel = nullptr;
};

struct HttpResponse {
  int status = 0;
  std::string body;  // for a stream with a 2xx status: empty (lines went to the callback)
  std::map<std::string, std::string> headers;  // lower-cased names
};

// The longest line a stream may send: the API server keeps no object over
// 1.5 MiB (etcd's request limit), so a longer watch event is garbage. A
// transport drops a stream whose line grows past it, with an error, rather
// than buffer it without bound.
inline constexpr size_t kMaxStreamLineBytes = 16u << 20;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual ApiResult<HttpResponse> Do(const HttpRequest& request) = 0;

  // Streams a response line by line. When the status is 2xx each complete
  // line (without its '\n') is handed to `on_line` as it arrives; returning
  // false stops the stream (the call then returns normally). For other
  // statuses the body is collected into the returned response instead.
  virtual ApiResult<HttpResponse> Stream(const HttpRequest& request,
                                         const std::function<bool(std::string_view line)>& on_line) = 0;
};

}  // namespace tessera::kube
