// ApiError / ApiResult<T>: errors from the Kubernetes API as values.
//
// An ApiError is either a transport failure (no HTTP response: connection
// refused, timeout, TLS failure; http_status == 0) or an HTTP error answer from
// the API server, in which case it carries the status code and the server's
// `Status.reason` / `Status.message`. Callers branch on the predicates
// (IsConflict, IsNotFound, IsGone, ...) rather than on message text.
//
// Thread-safety: plain values.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include "core/result.h"

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
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  ApiResult(ApiError error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }

  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  const ApiError& error() const {
    assert(!ok());
    return std::get<ApiError>(v_);
  }

  // Converts to the project-wide Result<T>, dropping the HTTP details.
  tessera::Result<T> ToResult() && {
    if (ok()) return std::move(*this).value();
    return error().ToError();
  }

 private:
  std::variant<T, ApiError> v_;
};

// Success, or an ApiError.
class [[nodiscard]] ApiStatus {
 public:
  ApiStatus() = default;
  ApiStatus(ApiError error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  static ApiStatus Ok() { return ApiStatus(); }

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const ApiError& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  ApiError error_;
  bool ok_ = true;
};

}  // namespace tessera::kube
