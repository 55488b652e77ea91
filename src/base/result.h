// Result<T, E> and BasicStatus<E>: errors as values (STYLE.md). Anything that
// can fail for reasons outside the program's control returns one of these
// instead of throwing. E is Error, a message for the person who must act,
// unless a module needs more (kube::ApiError keeps the HTTP status).
//
//   Result<Config> Load(const std::string& path) {
//     TESSERA_ASSIGN_OR_RETURN(std::string text, files::Read(path));
//     TESSERA_RETURN_IF_ERROR_WRAP(Check(text), "config " + path);
//     return Parse(text);
//   }
//
// The macros return the error of a failed Result or status from the enclosing
// function, which must return a Result or status over the same E. The _WRAP
// forms prepend context with E::Wrap; the context expression is evaluated
// only on failure.
//
// Header-only and dependency-free: every part includes it, the simulated
// driver (src/sim) too.
//
// Thread-safety: plain values; share them like any other value.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace tessera {

// A human-readable failure. `message` is written for the person who must act on
// it: it names the offending input and says what would be accepted.
struct Error {
  std::string message;

  // Prepends context ("container 'app': " + message) while keeping the cause.
  Error Wrap(const std::string& context) const { return Error{context + ": " + message}; }
};

template <typename T, typename E = Error>
class [[nodiscard]] Result {
 public:
  using value_type = T;
  using error_type = E;

  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(E error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  const E& error() const& {
    assert(!ok());
    return std::get<1>(v_);
  }
  E&& error() && {
    assert(!ok());
    return std::get<1>(std::move(v_));
  }

 private:
  std::variant<T, E> v_;
};

// Success, or an E: a Result without a value.
template <typename E>
class [[nodiscard]] BasicStatus {
 public:
  using error_type = E;

  BasicStatus() = default;
  BasicStatus(E error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  static BasicStatus Ok() { return BasicStatus(); }

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const E& error() const& {
    assert(!ok_);
    return error_;
  }
  E&& error() && {
    assert(!ok_);
    return std::move(error_);
  }

 private:
  E error_{};
  bool ok_ = true;
};

using Status = BasicStatus<Error>;

}  // namespace tessera

#define TESSERA_RESULT_CONCAT_INNER_(a, b) a##b
#define TESSERA_RESULT_CONCAT_(a, b) TESSERA_RESULT_CONCAT_INNER_(a, b)
#define TESSERA_RESULT_TMP_ TESSERA_RESULT_CONCAT_(tessera_result_, __LINE__)

// Evaluates `expr` (a status or a Result); on failure returns its error.
#define TESSERA_RETURN_IF_ERROR(expr)                                     \
  do {                                                                    \
    auto&& tessera_status_ = (expr);                                      \
    if (!tessera_status_.ok()) return std::move(tessera_status_).error(); \
  } while (false)

// The same, the error wrapped with `context` (E::Wrap).
#define TESSERA_RETURN_IF_ERROR_WRAP(expr, context)                                     \
  do {                                                                                  \
    auto&& tessera_status_ = (expr);                                                    \
    if (!tessera_status_.ok()) return std::move(tessera_status_).error().Wrap(context); \
  } while (false)

// Evaluates `expr` (a Result); on failure returns its error, else moves its
// value into `lhs`, which may declare a variable (`auto x`, `const T& x`).
#define TESSERA_ASSIGN_OR_RETURN(lhs, expr) TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_RESULT_TMP_, lhs, expr, )

// The same, the error wrapped with `context` (E::Wrap).
#define TESSERA_ASSIGN_OR_RETURN_WRAP(lhs, expr, context) \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_RESULT_TMP_, lhs, expr, .Wrap(context))

#define TESSERA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr, wrap) \
  auto tmp = (expr);                                         \
  if (!tmp.ok()) return std::move(tmp).error() wrap;         \
  lhs = std::move(tmp).value()
