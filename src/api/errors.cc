#include "api/errors.h"

#include "absl/strings/cord.h"
#include "common/strings.h"

namespace berth::api {
namespace {

constexpr char kReasonUrl[] = "type.berth.dev/k8s-reason";

absl::Status WithReason(absl::StatusCode code, std::string_view message, std::string_view reason) {
  absl::Status st(code, std::string(message));
  st.SetPayload(kReasonUrl, absl::Cord(std::string(reason)));
  return st;
}

}  // namespace

absl::Status Invalid(std::string_view kind, std::string_view name, const FieldErrors& errors) {
  std::string msg = StrCat(kind, " \"", name, "\" is invalid: ");
  if (errors.size() > 1) msg += "[";
  for (size_t i = 0; i < errors.size(); ++i) {
    if (i > 0) msg += ", ";
    msg += errors[i].field.empty() ? errors[i].detail : StrCat(errors[i].field, ": ", errors[i].detail);
  }
  if (errors.size() > 1) msg += "]";
  return WithReason(absl::StatusCode::kInvalidArgument, msg, "Invalid");
}

absl::Status BadRequest(std::string_view message) {
  return WithReason(absl::StatusCode::kInvalidArgument, message, "BadRequest");
}

absl::Status MethodNotAllowed(std::string_view message) {
  return WithReason(absl::StatusCode::kUnimplemented, message, "MethodNotAllowed");
}

absl::Status UnsupportedMediaType(std::string_view message) {
  return WithReason(absl::StatusCode::kInvalidArgument, message, "UnsupportedMediaType");
}

HttpError ToHttpError(const absl::Status& status) {
  std::string reason;
  if (auto p = status.GetPayload(kReasonUrl)) reason = std::string(*p);
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return {200, ""};
    case absl::StatusCode::kNotFound:
      return {404, "NotFound"};
    case absl::StatusCode::kAlreadyExists:
      return {409, "AlreadyExists"};
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kFailedPrecondition:
      return {409, "Conflict"};
    case absl::StatusCode::kOutOfRange:
      return {410, "Expired"};
    case absl::StatusCode::kInvalidArgument:
      if (reason == "BadRequest") return {400, reason};
      if (reason == "UnsupportedMediaType") return {415, reason};
      return {422, "Invalid"};
    case absl::StatusCode::kUnauthenticated:
      return {401, "Unauthorized"};
    case absl::StatusCode::kPermissionDenied:
      return {403, "Forbidden"};
    case absl::StatusCode::kUnimplemented:
      return {405, "MethodNotAllowed"};
    case absl::StatusCode::kDeadlineExceeded:
      return {504, "Timeout"};
    case absl::StatusCode::kUnavailable:
      return {503, "ServiceUnavailable"};
    case absl::StatusCode::kResourceExhausted:
      return {429, "TooManyRequests"};
    default:
      return {500, "InternalError"};
  }
}

}  // namespace berth::api
