// ApiError / ApiResult<T> / ApiStatus: errors from the Kubernetes API as values;
// ApiResult and ApiStatus are base/result.h's types over ApiError.
//
// An ApiError is either a transport failure (no HTTP response: connection
// refused, timeout, TLS failure; http_status == 0) or an HTTP error answer from
// the API server, in which case it carries the status code and the server's
// `Status.reason` / `Status.message`. Callers branch on the predicates
// (IsConflict, IsNotFound, IsGone, ...) rather than on message text.
//
// Thread-safety: plain values.
#pragma once

#include <string>

#include "base/result.h"

namespace tessera::kube {

struct ApiError {
  int http_status = 0;  // 0: no HTTP response at all (transport failure or bad input).
  std::string reason;   // Status.reason from the server ("Conflict", "NotFound", ...), or ours.
  std::string message;  // Human-readable; includes the server's Status.message when there was one.

  bool IsTransport() const { return http_status == 0; }
  bool IsConflict() const { return http_status == 409; }
  bool IsNotFound() const { return http_status == 404; }
  bool IsAlreadyExists() const { return http_status == 409 && reason == "AlreadyExists"; }
  bool IsGone() const { return http_status == 410; }
  bool IsServerError() const { return http_status >= 500; }

  // Prepends context while keeping status and reason.
  ApiError Wrap(const std::string& context) const {
    return ApiError{http_status, reason, context + ": " + message};
  }
  tessera::Error ToError() const { return tessera::Error{message}; }
};

template <typename T>
using ApiResult = tessera::Result<T, ApiError>;

// Success, or an ApiError.
using ApiStatus = tessera::BasicStatus<ApiError>;

}  // namespace tessera::kube
