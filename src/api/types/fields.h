// Typed views of Kubernetes objects: how a struct maps to its JSON, and the
// generic decode and encode that follow the map.
//
// A modeled struct lists its fields once, with their JSON keys as in the Go
// types of k8s.io/api, and keeps every key it does not model in `unknown`:
//
//   struct SecretReference {
//     std::string name;
//     std::string namespace_;
//     Unknown unknown;
//     static constexpr auto Fields() {
//       using T = SecretReference;
//       return std::tuple{F("name", &T::name), F("namespace", &T::namespace_)};
//     }
//     bool operator==(const SecretReference&) const = default;
//   };
//
//   absl::StatusOr<PersistentVolumeClaim> claim = Decode<PersistentVolumeClaim>(json);
//   claim->spec.volume_name = "pv-1";
//   nlohmann::json out = Encode(*claim);  // unknown fields come back as they were
//
// Rules (the Go types' rules, so a round trip through berth changes nothing
// a Go client would keep):
//  - `F` is a field tagged `omitempty`: encode leaves it out when empty ("",
//    0, false, an empty list or map, a struct with nothing set). `Always` is
//    a field without omitempty: a scalar or list is written even when empty,
//    as Go does. A field read empty (`readOnly: false`, `metadata: {}`, null)
//    and still empty is written back as it was read: a round trip changes
//    nothing.
//  - A Go pointer field (`*string`, `*bool`, `*Struct`) is a std::optional:
//    absent (or null) decodes to nullopt and nullopt is never written, so
//    "" and "absent" stay apart (PVC spec.storageClassName).
//  - JSON null decodes as absent everywhere (the API server's rule).
//  - Decoding is strict about types: a value of the wrong JSON type is
//    INVALID_ARGUMENT naming the field path, as kube-apiserver reports it:
//    `spec.volumeName: Invalid value: 5: expected string`. Nothing is
//    silently defaulted.
//  - Decoding is total: every key a struct does not model (at any depth,
//    list elements included) is kept in that struct's `unknown` and written
//    back by Encode, so a read-modify-write preserves fields berth does not
//    know — a newer client's fields too.
//  - Times (metav1.Time) are kept as their RFC 3339 strings.
//
// Thread-safety: stateless functions over value types.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/quantity.h"
#include "nlohmann/json.hpp"

namespace berth::api::types {

using Json = nlohmann::json;
// The keys of an object a struct does not model, verbatim (null: none).
using Unknown = Json;

enum class Emit {
  kOmitEmpty,  // `json:"key,omitempty"`
  kAlways,     // `json:"key"`
};

template <typename T, typename M>
struct FieldSpec {
  std::string_view key;
  M T::*member;
  Emit emit;
};

// A field tagged omitempty (most Kubernetes fields).
template <typename T, typename M>
constexpr FieldSpec<T, M> F(std::string_view key, M T::*member) {
  return {key, member, Emit::kOmitEmpty};
}
// A field without omitempty: written even when empty.
template <typename T, typename M>
constexpr FieldSpec<T, M> Always(std::string_view key, M T::*member) {
  return {key, member, Emit::kAlways};
}

// Where a value is in the object being decoded: a chain of parents on the
// stack, turned into "spec.containers[0].name" only for an error.
class Path {
 public:
  Path() = default;
  Path(const Path* parent, std::string_view key) : parent_(parent), key_(key) {}
  Path(const Path* parent, size_t index) : parent_(parent), index_(index), is_index_(true) {}
  // A map key: printed "metadata.annotations[key]".
  static Path MapKey(const Path* parent, std::string_view key) {
    Path p(parent, key);
    p.is_map_key_ = true;
    return p;
  }
  std::string ToString() const;

 private:
  const Path* parent_ = nullptr;
  std::string_view key_;
  size_t index_ = 0;
  bool is_index_ = false;
  bool is_map_key_ = false;
};

template <typename T>
concept Modeled = requires {
  T::Fields();
};

namespace internal {

// INVALID_ARGUMENT "<path>: Invalid value: <v>: expected <want>".
absl::Status TypeError(const Json& v, std::string_view want, const Path& path);
absl::Status DecodeScalar(const Json& j, std::string& out, const Path& path);
absl::Status DecodeScalar(const Json& j, bool& out, const Path& path);
absl::Status DecodeScalar(const Json& j, int64_t& out, const Path& path);
absl::Status DecodeScalar(const Json& j, int32_t& out, const Path& path);
absl::Status DecodeScalar(const Json& j, Quantity& out, const Path& path);
// "<Kind> <ns>/<name>: " for decode errors of a whole object.
std::string ObjectPrefix(std::string_view kind, const Json& j);

template <typename T>
struct IsOptional : std::false_type {};
template <typename U>
struct IsOptional<std::optional<U>> : std::true_type {};
template <typename T>
struct IsVector : std::false_type {};
template <typename U>
struct IsVector<std::vector<U>> : std::true_type {};
template <typename T>
struct IsStringMap : std::false_type {};
template <typename U>
struct IsStringMap<std::map<std::string, U>> : std::true_type {};

}  // namespace internal

template <typename T>
absl::Status DecodeValue(const Json& j, T& out, const Path& path);
template <typename T>
bool IsEmpty(const T& v);

// Decodes the object `j` into a modeled struct, keeping unmodeled keys.
template <Modeled T>
absl::Status DecodeStruct(const Json& j, T& out, const Path& path) {
  if (!j.is_object()) return internal::TypeError(j, "object", path);
  constexpr auto fields = T::Fields();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    bool known = false, empty = false;
    absl::Status status;
    std::apply(
        [&](const auto&... f) {
          ((!known && key == f.key ? (known = true, status = DecodeValue(*it, out.*(f.member), Path(&path, f.key)),
                                      empty = status.ok() && IsEmpty(out.*(f.member)), 0)
                                   : 0),
           ...);
        },
        fields);
    if (!status.ok()) return status;
    // Unknown keys, and known ones read empty (null, false, "", {}): the
    // latter are written back as read while their member stays empty.
    if (!known || empty) out.unknown[key] = *it;
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status DecodeValue(const Json& j, T& out, const Path& path) {
  if (j.is_null()) {  // null is "not set" for every field
    out = T{};
    return absl::OkStatus();
  }
  if constexpr (std::is_same_v<T, Json>) {
    out = j;
    return absl::OkStatus();
  } else if constexpr (internal::IsOptional<T>::value) {
    out.emplace();
    return DecodeValue(j, *out, path);
  } else if constexpr (internal::IsVector<T>::value) {
    if (!j.is_array()) return internal::TypeError(j, "array", path);
    out.clear();
    out.resize(j.size());
    for (size_t i = 0; i < j.size(); ++i) {
      if (absl::Status s = DecodeValue(j[i], out[i], Path(&path, i)); !s.ok()) return s;
    }
    return absl::OkStatus();
  } else if constexpr (internal::IsStringMap<T>::value) {
    if (!j.is_object()) return internal::TypeError(j, "object", path);
    out.clear();
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (absl::Status s = DecodeValue(*it, out[it.key()], Path::MapKey(&path, it.key())); !s.ok()) return s;
    }
    return absl::OkStatus();
  } else if constexpr (Modeled<T>) {
    out = T{};
    return DecodeStruct(j, out, path);
  } else {
    return internal::DecodeScalar(j, out, path);
  }
}

template <typename T>
bool IsEmpty(const T& v) {
  if constexpr (std::is_same_v<T, Json>) {
    return v.is_null();
  } else if constexpr (internal::IsOptional<T>::value) {
    return !v.has_value();
  } else if constexpr (std::is_same_v<T, std::string> || internal::IsVector<T>::value ||
                       internal::IsStringMap<T>::value) {
    return v.empty();
  } else if constexpr (std::is_same_v<T, bool>) {
    return !v;
  } else if constexpr (std::is_integral_v<T>) {
    return v == 0;
  } else if constexpr (Modeled<T>) {
    return v == T{};
  } else {
    return false;  // quantities
  }
}

template <typename T>
Json EncodeValue(const T& v);

// The struct's unknown keys with its modeled fields written over them.
template <Modeled T>
Json EncodeStruct(const T& v) {
  Json out = v.unknown.is_object() ? v.unknown : Json::object();
  std::apply(
      [&](const auto&... f) {
        auto one = [&](const auto& field) {
          const auto& m = v.*(field.member);
          using M = std::decay_t<decltype(m)>;
          if constexpr (internal::IsOptional<M>::value) {
            if (m.has_value()) out[std::string(field.key)] = EncodeValue(*m);
          } else if constexpr (Modeled<M>) {
            if (!IsEmpty(m)) out[std::string(field.key)] = EncodeValue(m);
          } else if (field.emit == Emit::kAlways || !IsEmpty(m)) {
            out[std::string(field.key)] = EncodeValue(m);
          }
        };
        (one(f), ...);
      },
      T::Fields());
  return out;
}

template <typename T>
Json EncodeValue(const T& v) {
  if constexpr (std::is_same_v<T, Json>) {
    return v;
  } else if constexpr (internal::IsOptional<T>::value) {
    return v ? EncodeValue(*v) : Json();
  } else if constexpr (internal::IsVector<T>::value) {
    Json out = Json::array();
    for (const auto& e : v) out.push_back(EncodeValue(e));
    return out;
  } else if constexpr (internal::IsStringMap<T>::value) {
    Json out = Json::object();
    for (const auto& [k, e] : v) out[k] = EncodeValue(e);
    return out;
  } else if constexpr (Modeled<T>) {
    return EncodeStruct(v);
  } else if constexpr (std::is_same_v<T, Quantity>) {
    return v.ToString();
  } else {
    return Json(v);
  }
}

// A whole object (a struct with `kKind`): INVALID_ARGUMENT
// "PersistentVolumeClaim default/data: spec.volumeName: Invalid value: ...".
template <Modeled T>
absl::StatusOr<T> Decode(const Json& j) {
  T out;
  Path root;
  if (absl::Status s = DecodeStruct(j, out, root); !s.ok()) {
    return absl::InvalidArgumentError(internal::ObjectPrefix(T::kKind, j) + std::string(s.message()));
  }
  return out;
}

template <Modeled T>
Json Encode(const T& v) {
  return EncodeStruct(v);
}

}  // namespace berth::api::types
