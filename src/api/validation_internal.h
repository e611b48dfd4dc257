// What the parts of validation (validation.cc, validation_core.cc,
// validation_storage.cc) share: field-error collection in Kubernetes' shape,
// small checks, and the validator of each kind. Not for use outside src/api.
#ifndef BERTH_API_VALIDATION_INTERNAL_H_
#define BERTH_API_VALIDATION_INTERNAL_H_

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "api/errors.h"
#include "api/validation.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace berth::api::validation_internal {

using nlohmann::json;

const json& Get(const json& v, std::string_view key);
const json& Path(const json& v, std::initializer_list<std::string_view> keys);
std::string String(const json& v);
std::string Quote(std::string_view s);
std::string Supported(const std::vector<std::string_view>& values);

// Records field errors in Kubernetes' "<field>: <Type>: <detail>" shape.
class Errors {
 public:
  void Required(const std::string& field, std::string_view detail = "") {
    Add(field, detail.empty() ? "Required value" : StrCat("Required value: ", detail));
  }
  void InvalidValue(const std::string& field, const json& value, std::string_view detail) {
    std::string shown = value.is_string() ? Quote(value.get<std::string>()) : value.dump();
    Add(field, StrCat("Invalid value: ", shown, ": ", detail));
  }
  void Unsupported(const std::string& field, const json& value, const std::vector<std::string_view>& values) {
    Add(field, StrCat("Unsupported value: ", value.is_string() ? Quote(String(value)) : value.dump(), ": ",
                      Supported(values)));
  }
  void Forbidden(const std::string& field, std::string_view detail) { Add(field, StrCat("Forbidden: ", detail)); }
  void Duplicate(const std::string& field, const json& value) {
    Add(field, StrCat("Duplicate value: ", value.is_string() ? Quote(String(value)) : value.dump()));
  }
  void NotFound(const std::string& field, const json& value) {
    Add(field, StrCat("Not found: ", value.is_string() ? Quote(String(value)) : value.dump()));
  }
  // A status from names.h: "<field>: <detail>".
  void FromStatus(const absl::Status& st) {
    if (st.ok()) return;
    std::string msg(st.message());
    size_t sep = msg.find(": ");
    if (sep == std::string::npos) {
      list_.push_back({"", msg});
    } else {
      list_.push_back({msg.substr(0, sep), msg.substr(sep + 2)});
    }
  }
  void Add(const std::string& field, std::string detail) { list_.push_back({field, std::move(detail)}); }
  bool empty() const { return list_.empty(); }
  const FieldErrors& list() const { return list_; }

 private:
  FieldErrors list_;
};

void Enum(Errors& errs, const std::string& field, const json& value, const std::vector<std::string_view>& allowed,
          bool required = false);
void RequiredString(Errors& errs, const std::string& field, const json& value);
// > 0 quantity; `field` names it in the message.
void PositiveQuantity(Errors& errs, const std::string& field, const json& value);
void AccessModes(Errors& errs, const std::string& field, const json& modes);
// Label and annotation keys: [prefix/]name, name ≤ 63 of [A-Za-z0-9._-]
// starting and ending alphanumeric, prefix a DNS subdomain.
bool ValidQualifiedName(std::string_view key);
bool ValidLabelValue(std::string_view v);

// The validators of each kind. The core group (and coordination's Lease) is
// in validation_core.cc, storage.k8s.io and snapshot.storage.k8s.io in
// validation_storage.cc.
void ValidateClaim(const json& obj, const json* old, Errors& errs);
void ValidateVolume(const json& obj, const json* old, Errors& errs);
// core/v1 taints and tolerations (Kubernetes' validateNodeTaints and
// ValidateTolerations, the rules the node lifecycle controller, the
// scheduler and taint-based eviction rely on).
void ValidateTaints(const json& taints, Errors& errs);
// coordination.k8s.io/v1 Lease (ValidateLeaseSpec).
void ValidateLease(const json& obj, Errors& errs);
void ValidatePod(const json& obj, const json* old, Errors& errs);
void ValidateSecret(const json& obj, const json* old, Errors& errs);
void ValidateEvent(const json& obj, Errors& errs);

void ValidateStorageClass(const json& obj, const json* old, Errors& errs);
void ValidateAttachment(const json& obj, const json* old, Errors& errs);
void ValidateCsiDriver(const json& obj, Errors& errs);
void ValidateCsiNode(const json& obj, const json* old, Errors& errs);
void ValidateCapacity(const json& obj, const json* old, Errors& errs);

void ValidateSnapshotClass(const json& obj, Errors& errs);
void ValidateSnapshot(const json& obj, const json* old, Errors& errs);
void ValidateSnapshotContent(const json& obj, const json* old, Errors& errs);

// backup.berth.io (validation_backup.cc).
void ValidateBackupStorageLocation(const json& obj, Errors& errs);
void ValidateBackup(const json& obj, Errors& errs);
void ValidateRestore(const json& obj, Errors& errs);
void ValidateSchedule(const json& obj, Errors& errs);

}  // namespace berth::api::validation_internal

#endif  // BERTH_API_VALIDATION_INTERNAL_H_
