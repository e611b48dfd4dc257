#include "api/schema.h"

#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/time/time.h"
#include "api/errors.h"
#include "api/quantity.h"
#include "common/strings.h"

namespace berth::api {
namespace {

SchemaPtr Leaf(Schema::Type type) {
  auto s = std::make_shared<Schema>();
  s->type = type;
  return s;
}

// Where a value is, built into a string only for an error: a chain of
// the steps taken, on the stack (a write checks every field of its object,
// and almost never fails).
struct Path {
  enum class Step { kRoot, kField, kKey, kIndex };
  const Path* parent = nullptr;
  Step step = Step::kRoot;
  std::string_view name;  // kField, kKey
  size_t index = 0;       // kIndex
};

void AppendPath(const Path& p, std::string& out) {
  if (p.step == Path::Step::kRoot) return;
  AppendPath(*p.parent, out);
  switch (p.step) {
    case Path::Step::kField:
      out += StrCat(out.empty() ? "" : ".", p.name);
      break;
    case Path::Step::kKey:
      out += StrCat("[", p.name, "]");
      break;
    case Path::Step::kIndex:
      out += StrCat("[", p.index, "]");
      break;
    case Path::Step::kRoot:
      break;
  }
}

std::string PathString(const Path& p) {
  std::string out;
  AppendPath(p, out);
  return out;
}

const char* GoType(Schema::Type t) {
  switch (t) {
    case Schema::Type::kString:
    case Schema::Type::kTime:
    case Schema::Type::kBase64:
      return "string";
    case Schema::Type::kInt:
      return "int64";
    case Schema::Type::kNumber:
      return "float64";
    case Schema::Type::kBool:
      return "bool";
    case Schema::Type::kArray:
      return "array";
    case Schema::Type::kMap:
    case Schema::Type::kObject:
      return "object";
    default:
      return "value";
  }
}

absl::Status TypeError(const nlohmann::json& v, Schema::Type want, const Path& path) {
  return BadRequest(StrCat("json: cannot unmarshal ", JsonTypeName(v), " into Go value of type ", GoType(want),
                           " (field \"", PathString(path), "\")"));
}

absl::Status Check(const nlohmann::json& v, const Schema& s, const Path& path, int depth) {
  if (depth > 64) return BadRequest(StrCat("object nested too deeply at \"", PathString(path), "\""));
  if (v.is_null()) return absl::OkStatus();  // null means "not set" for every field
  switch (s.type) {
    case Schema::Type::kAny:
      return absl::OkStatus();
    case Schema::Type::kString:
      if (!v.is_string()) return TypeError(v, s.type, path);
      return absl::OkStatus();
    case Schema::Type::kInt:
      if (v.is_number_integer()) return absl::OkStatus();
      if (v.is_number_float()) {
        double d = v.get<double>();
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) return absl::OkStatus();
      }
      return TypeError(v, s.type, path);
    case Schema::Type::kNumber:
      if (!v.is_number()) return TypeError(v, s.type, path);
      return absl::OkStatus();
    case Schema::Type::kBool:
      if (!v.is_boolean()) return TypeError(v, s.type, path);
      return absl::OkStatus();
    case Schema::Type::kIntOrString:
      if (!v.is_string() && !v.is_number_integer()) return TypeError(v, s.type, path);
      return absl::OkStatus();
    case Schema::Type::kQuantity: {
      std::string dumped;
      std::string_view text;
      if (v.is_string()) {
        text = v.get_ref<const std::string&>();
      } else if (v.is_number()) {
        dumped = v.dump();
        text = dumped;
      } else {
        return TypeError(v, s.type, path);
      }
      if (!Quantity::Parse(text).ok()) {
        return BadRequest(StrCat(PathString(path),
                                 ": quantities must match the regular expression "
                                 "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"));
      }
      return absl::OkStatus();
    }
    case Schema::Type::kTime: {
      if (!v.is_string()) return TypeError(v, s.type, path);
      absl::Time t;
      std::string err;
      if (!absl::ParseTime(absl::RFC3339_full, v.get_ref<const std::string&>(), &t, &err)) {
        return BadRequest(StrCat(PathString(path), ": invalid time \"", v.get<std::string>(),
                                 "\": expected RFC 3339 (2006-01-02T15:04:05Z)"));
      }
      return absl::OkStatus();
    }
    case Schema::Type::kBase64: {
      if (!v.is_string()) return TypeError(v, s.type, path);
      std::string out;
      if (!absl::Base64Unescape(v.get_ref<const std::string&>(), &out)) {
        return BadRequest(StrCat(PathString(path), ": illegal base64 data"));
      }
      return absl::OkStatus();
    }
    case Schema::Type::kObject:
      if (!v.is_object()) return TypeError(v, s.type, path);
      for (const auto& [key, value] : v.items()) {
        auto it = s.fields.find(key);
        const Path field{.parent = &path, .step = Path::Step::kField, .name = key, .index = 0};
        if (it == s.fields.end()) {
          return BadRequest(StrCat("strict decoding error: unknown field \"", PathString(field), "\""));
        }
        if (absl::Status st = Check(value, *it->second, field, depth + 1); !st.ok()) {
          return st;
        }
      }
      return absl::OkStatus();
    case Schema::Type::kArray: {
      if (!v.is_array()) return TypeError(v, s.type, path);
      for (size_t i = 0; i < v.size(); ++i) {
        if (absl::Status st = Check(
                v[i], *s.elem, Path{.parent = &path, .step = Path::Step::kIndex, .name = {}, .index = i}, depth + 1);
            !st.ok()) {
          return st;
        }
      }
      return absl::OkStatus();
    }
    case Schema::Type::kMap:
      if (!v.is_object()) return TypeError(v, s.type, path);
      for (const auto& [key, value] : v.items()) {
        if (absl::Status st = Check(
                value, *s.elem, Path{.parent = &path, .step = Path::Step::kKey, .name = key, .index = 0}, depth + 1);
            !st.ok()) {
          return st;
        }
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

const char* JsonTypeName(const nlohmann::json& v) {
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "bool";
  if (v.is_number()) return "number";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "null";
}

SchemaPtr AnyValue() { return Leaf(Schema::Type::kAny); }
SchemaPtr Str() { return Leaf(Schema::Type::kString); }
SchemaPtr Int() { return Leaf(Schema::Type::kInt); }
SchemaPtr Num() { return Leaf(Schema::Type::kNumber); }
SchemaPtr Bool() { return Leaf(Schema::Type::kBool); }
SchemaPtr Qty() { return Leaf(Schema::Type::kQuantity); }
SchemaPtr IntOrStr() { return Leaf(Schema::Type::kIntOrString); }
SchemaPtr Time() { return Leaf(Schema::Type::kTime); }
SchemaPtr Base64() { return Leaf(Schema::Type::kBase64); }

SchemaPtr Obj(std::vector<std::pair<std::string, SchemaPtr>> fields) {
  auto s = std::make_shared<Schema>();
  s->type = Schema::Type::kObject;
  for (auto& [name, field] : fields) s->fields.emplace(std::move(name), std::move(field));
  return s;
}

SchemaPtr Arr(SchemaPtr elem, std::string merge_key) {
  auto s = std::make_shared<Schema>();
  s->type = Schema::Type::kArray;
  s->elem = std::move(elem);
  s->merge_key = std::move(merge_key);
  return s;
}

SchemaPtr PrimitiveSet(SchemaPtr elem) {
  auto s = std::make_shared<Schema>();
  s->type = Schema::Type::kArray;
  s->elem = std::move(elem);
  s->merge_primitives = true;
  return s;
}

SchemaPtr Map(SchemaPtr value) {
  auto s = std::make_shared<Schema>();
  s->type = Schema::Type::kMap;
  s->elem = std::move(value);
  return s;
}

absl::Status CheckSchema(const nlohmann::json& object, const Schema& schema) {
  return Check(object, schema, Path{}, 0);
}

}  // namespace berth::api
