// Result<T>: the error-carrying return type at every library boundary (a small stand-in for
// C++23 std::expected). Libraries never print and never throw across their public surface;
// they return a Result whose Error names the input and the place that was wrong.
#pragma once

#include <cassert>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace cordon {

struct Error {
  std::string message;  // human readable: what failed, on which input, where
  int code = 0;         // optional module-specific code (an enum value), 0 = unspecified
};

// Wrapper so that `return fail("...")` converts into any Result<T>.
struct Failure {
  Error error;
};

inline Failure fail(std::string message, int code = 0) {
  return Failure{Error{std::move(message), code}};
}
inline Failure fail(Error e) {
  return Failure{std::move(e)};
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Result(Failure f) : v_(std::in_place_index<1>, std::move(f.error)) {}
  template <class U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, T> &&
           !std::is_same_v<std::decay_t<U>, Failure> && !std::is_same_v<std::decay_t<U>, Result>)
      Result(U&& u)
      : v_(std::in_place_index<0>, T(std::forward<U>(u))) {}

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & {
    assert(has_value());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(has_value());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(has_value());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const {
    assert(!has_value());
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Failure f) : error_(std::move(f.error)), ok_(false) {}
  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

// Prefix an error with context ("loading rules.yaml: ...") while passing it up.
inline Failure with_context(const std::string& context, const Error& e) {
  return Failure{Error{context + ": " + e.message, e.code}};
}

}  // namespace cordon
