// Status and Result<T>: how every kvserve module reports an error that a user or a file can
// cause. Broken invariants are CHECK failures instead (util/check.h).
//
// Contract: a Status is either OK or carries a code and a message that says what went wrong and,
// where possible, what to do. Result<T> holds a T or a non-OK Status. Both are cheap to move and
// safe to pass between threads; neither is thread-safe to mutate concurrently.
#pragma once

#include <cstdlib>
#include <cstdio>
#include <string>
#include <utility>
#include <variant>

namespace kvserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller passed something malformed or out of range
  kNotFound,           // a file, key, tensor or token that is not there
  kOutOfRange,         // a length or index past a limit (prompt longer than the context)
  kDataLoss,           // a file is corrupt or truncated
  kUnimplemented,      // a valid input we do not support (unknown architecture, tensor type)
  kResourceExhausted,  // out of memory, KV blocks or queue slots
  kFailedPrecondition,
  kIoError,
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Holds either a value or a non-OK Status. Accessing value() of an error aborts with the message.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) {
      std::fprintf(stderr, "Result constructed from an OK Status without a value\n");
      std::abort();
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return Checked(); }
  const T& value() const& { return const_cast<Result*>(this)->Checked(); }
  T&& value() && { return std::move(Checked()); }
  T& operator*() & { return Checked(); }
  const T& operator*() const& { return const_cast<Result*>(this)->Checked(); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &const_cast<Result*>(this)->Checked(); }

 private:
  T& Checked() {
    if (!ok()) {
      std::fprintf(stderr, "Result::value() on error: %s\n", status().ToString().c_str());
      std::abort();
    }
    return std::get<T>(v_);
  }
  std::variant<T, Status> v_;
};

}  // namespace kvserve

#define KV_STATUS_CONCAT_INNER(a, b) a##b
#define KV_STATUS_CONCAT(a, b) KV_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define KV_RETURN_IF_ERROR(expr)                          \
  do {                                                    \
    ::kvserve::Status kv_status_tmp_ = (expr);            \
    if (!kv_status_tmp_.ok()) return kv_status_tmp_;      \
  } while (0)

// KV_ASSIGN_OR_RETURN(auto x, MakeX()); declares/assigns x or returns the error.
#define KV_ASSIGN_OR_RETURN(lhs, expr) \
  KV_ASSIGN_OR_RETURN_IMPL(KV_STATUS_CONCAT(kv_result_, __LINE__), lhs, expr)
#define KV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
