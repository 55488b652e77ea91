// Result<T>: errors as values (see STYLE.md). Anything that can fail for reasons
// outside the program's control returns one of these instead of throwing.
//
// Thread-safety: a Result is a plain value; share it like any other value.
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

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

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

  const Error& error() const {
    assert(!ok());
    return std::get<Error>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

// Result<void> equivalent: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  static Status Ok() { return Status(); }

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace tessera
