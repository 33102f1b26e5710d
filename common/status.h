// Status and StatusOr: how ElasticPS components report errors to each other.
//
// The code tells the caller what to do next:
//   kUnavailable        retry the call (peer not reachable, deadline passed).
//   kAborted            re-read the assignment / plan and redo the work.
//   kInvalidArgument,
//   kFailedPrecondition do not retry: the request itself is wrong.
//   kProtocolError      a peer broke the protocol: a malformed or inconsistent
//                       message; not retried on that peer's word.
//   kUnimplemented      the peer cannot do it this way; do it another way (a
//                       shard that cannot map a push's shared memory: push
//                       through the socket).
//   kPermissionDenied   a server refused this process's CURVE key (or the two
//                       disagree on CURVE): do not retry with the same key.
//   kDataLoss           data at rest is damaged (a corrupt store or file on
//                       disk); never a message from the network.
// Library code never aborts on input from the network, a file or a user; it
// returns one of these instead. Thread-compatible value types.
//
// StatusOr::value() (and -> and *) on an error is a bug in the calling code:
// it prints the status and aborts, in every build.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace eps {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kFailedPrecondition = 2,
  kUnavailable = 3,
  kAborted = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kDeadlineExceeded = 7,
  kUnauthenticated = 8,
  kResourceExhausted = 9,
  kDataLoss = 10,
  kInternal = 11,
  kProtocolError = 12,
  kUnimplemented = 13,
  kPermissionDenied = 14,
  // New codes go here, at the end: the numbers travel in ErrorReply and RollbackDone.
};

// The largest code there is; a code read from the wire above it is unknown.
inline constexpr StatusCode kLastStatusCode = StatusCode::kPermissionDenied;

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status Unauthenticated(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status ProtocolError(std::string m) { return {StatusCode::kProtocolError, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}

namespace internal {
// Prints `what` and `status` to stderr and aborts: a StatusOr used wrongly.
[[noreturn]] void DieOfBadStatusOr(const char* what, const Status& status);
}  // namespace internal

// Either a value or a non-OK Status. Reading the value of an error, or making
// one from an OK Status, aborts (see the top of this file).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) internal::DieOfBadStatusOr("StatusOr made from an OK status", status_);
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    CheckOk();
    return *value_;
  }
  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void CheckOk() const {
    if (__builtin_expect(!status_.ok(), 0))
      internal::DieOfBadStatusOr("StatusOr::value() of an error", status_);
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace eps

#define EPS_CONCAT_INNER(a, b) a##b
#define EPS_CONCAT(a, b) EPS_CONCAT_INNER(a, b)

#define EPS_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::eps::Status eps_status_ = (expr);        \
    if (!eps_status_.ok()) return eps_status_; \
  } while (0)

#define EPS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// EPS_ASSIGN_OR_RETURN(auto x, MakeX());
#define EPS_ASSIGN_OR_RETURN(lhs, expr) \
  EPS_ASSIGN_OR_RETURN_IMPL(EPS_CONCAT(eps_statusor_, __LINE__), lhs, expr)
