// Kubernetes API errors as absl::Status values.
//
// Inside berth errors are absl::Status; the API server turns them into
// Kubernetes `Status` objects. The status code picks the HTTP code and the
// `reason` (NotFound 404, AlreadyExists/Conflict 409, Invalid 422, Gone 410);
// where one code covers two reasons (INVALID_ARGUMENT is both 400 BadRequest
// and 422 Invalid) the reason travels as a payload.
//
//   return api::Invalid("PersistentVolumeClaim", "data",
//                       {{"spec.accessModes", "Required value"}});
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace berth::api {

// One field error: {"spec.resources.requests.storage", "Required value"}.
struct FieldError {
  std::string field;
  std::string detail;
};
using FieldErrors = std::vector<FieldError>;

// 422 Invalid: `<Kind> "<name>" is invalid: <field>: <detail>, ...`.
absl::Status Invalid(std::string_view kind, std::string_view name, const FieldErrors& errors);
// 422 with reason Invalid and no field list (a patch that does not apply).
absl::Status Unprocessable(std::string_view message);
// The Status `details` JSON an error carries ("" if none): for Invalid,
// {"name","kind","causes":[{"reason","message","field"}]}.
std::string StatusDetails(const absl::Status& status);
// 400 BadRequest.
absl::Status BadRequest(std::string_view message);
// 405 MethodNotAllowed.
absl::Status MethodNotAllowed(std::string_view message);
// 415 UnsupportedMediaType.
absl::Status UnsupportedMediaType(std::string_view message);

// The Kubernetes reason and HTTP code for `status`:
//   NOT_FOUND → NotFound 404, ALREADY_EXISTS → AlreadyExists 409,
//   ABORTED → Conflict 409, OUT_OF_RANGE → Expired 410 (Gone),
//   INVALID_ARGUMENT → Invalid 422 or BadRequest 400 (payload),
//   UNAUTHENTICATED → Unauthorized 401, PERMISSION_DENIED → Forbidden 403,
//   FAILED_PRECONDITION → Conflict 409, DEADLINE_EXCEEDED → Timeout 504,
//   UNAVAILABLE → ServiceUnavailable 503, else InternalError 500.
struct HttpError {
  int code;
  std::string reason;
};
HttpError ToHttpError(const absl::Status& status);

}  // namespace berth::api
