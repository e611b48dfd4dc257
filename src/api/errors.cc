#include "api/errors.h"

#include "absl/strings/cord.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace berth::api {
namespace {

constexpr char kReasonUrl[] = "type.berth.dev/k8s-reason";
constexpr char kDetailsUrl[] = "type.berth.dev/k8s-details";

// Kubernetes' CauseType for a field error's detail ("Required value: ...").
std::string CauseReason(std::string_view detail) {
  static constexpr std::pair<std::string_view, std::string_view> kReasons[] = {
      {"Required value", "FieldValueRequired"}, {"Unsupported value", "FieldValueNotSupported"},
      {"Forbidden", "FieldValueForbidden"},     {"Duplicate value", "FieldValueDuplicate"},
      {"Not found", "FieldValueNotFound"},      {"Too long", "FieldValueTooLong"},
      {"Too many", "FieldValueTooMany"},
  };
  for (const auto& [prefix, reason] : kReasons) {
    if (detail.starts_with(prefix)) return std::string(reason);
  }
  return "FieldValueInvalid";
}

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
  absl::Status st = WithReason(absl::StatusCode::kInvalidArgument, msg, "Invalid");
  // kubectl 1.20 prints an Invalid error from details.kind/name/causes only.
  nlohmann::json causes = nlohmann::json::array();
  for (const auto& e : errors) {
    causes.push_back({{"reason", CauseReason(e.detail)}, {"message", e.detail}, {"field", e.field}});
  }
  nlohmann::json details = {{"name", std::string(name)}, {"kind", std::string(kind)}, {"causes", causes}};
  st.SetPayload(kDetailsUrl, absl::Cord(details.dump()));
  return st;
}

std::string StatusDetails(const absl::Status& status) {
  if (auto p = status.GetPayload(kDetailsUrl)) return std::string(*p);
  return "";
}

absl::Status Unprocessable(std::string_view message) {
  return WithReason(absl::StatusCode::kInvalidArgument, message, "Invalid");
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
