#include "api/names.h"

#include "common/strings.h"

namespace berth::api {
namespace {

bool LowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One dot-separated part of a subdomain (no length limit of its own:
// Kubernetes bounds only the whole name).
bool IsPart(std::string_view s) {
  if (s.empty() || !LowerAlnum(s.front()) || !LowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!LowerAlnum(c) && c != '-') return false;
  }
  return true;
}

bool IsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63 || !LowerAlnum(s.front()) || !LowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!LowerAlnum(c) && c != '-') return false;
  }
  return true;
}

}  // namespace

absl::Status ValidateDns1123Subdomain(std::string_view field, std::string_view name) {
  bool ok = !name.empty() && name.size() <= 253;
  if (ok) {
    for (std::string_view part : Split(name, '.')) ok = ok && IsPart(part);
  }
  if (ok) return absl::OkStatus();
  if (name.size() > 253) {
    return absl::InvalidArgumentError(
        StrCat(field, ": Invalid value: \"", name, "\": must be no more than 253 characters"));
  }
  return absl::InvalidArgumentError(
      StrCat(field, ": Invalid value: \"", name,
             "\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
             "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
             "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"));
}

absl::Status ValidateDns1123Label(std::string_view field, std::string_view name) {
  if (IsLabel(name)) return absl::OkStatus();
  if (name.size() > 63) {
    return absl::InvalidArgumentError(
        StrCat(field, ": Invalid value: \"", name, "\": must be no more than 63 characters"));
  }
  return absl::InvalidArgumentError(
      StrCat(field, ": Invalid value: \"", name,
             "\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
             "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
             "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"));
}

}  // namespace berth::api
