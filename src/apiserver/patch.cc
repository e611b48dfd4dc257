#include "apiserver/patch.h"

#include <string>

#include "api/errors.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::apiserver {
namespace {

using nlohmann::json;

constexpr std::string_view kSetElementOrder = "$setElementOrder/";
constexpr std::string_view kDeleteFromPrimitiveList = "$deleteFromPrimitiveList/";

const api::Schema* Field(const api::Schema* s, const std::string& key) {
  if (s == nullptr) return nullptr;
  if (s->type == api::Schema::Type::kObject) {
    auto it = s->fields.find(key);
    return it == s->fields.end() ? nullptr : it->second.get();
  }
  if (s->type == api::Schema::Type::kMap) return s->elem.get();
  return nullptr;
}

absl::StatusOr<json> Merge(const json& original, const json& patch, const api::Schema* schema, int depth);

// Merges list `patch` into list `original` whose elements are objects keyed
// by `key`.
absl::StatusOr<json> MergeKeyedList(const json& original, const json& patch, const api::Schema* elem,
                                    const std::string& key, int depth) {
  json out = original.is_array() ? original : json::array();
  for (const auto& p : patch) {
    if (!p.is_object()) return api::BadRequest("strategic merge patch: list element is not an object");
    if (auto d = p.find("$patch"); d != p.end()) {
      if (*d == "replace") {
        // The whole list is replaced by the patch's other elements.
        json replaced = json::array();
        for (const auto& q : patch) {
          if (!(q.is_object() && q.contains("$patch"))) replaced.push_back(q);
        }
        return replaced;
      }
      if (*d == "delete") {
        if (!p.contains(key))
          return api::BadRequest(StrCat("strategic merge patch: delete directive without merge key \"", key, "\""));
        json kept = json::array();
        for (const auto& o : out) {
          if (!(o.is_object() && o.contains(key) && o[key] == p[key])) kept.push_back(o);
        }
        out = std::move(kept);
        continue;
      }
    }
    if (!p.contains(key)) {
      return api::BadRequest(StrCat("strategic merge patch: list element lacks merge key \"", key, "\""));
    }
    bool found = false;
    for (auto& o : out) {
      if (o.is_object() && o.contains(key) && o[key] == p[key]) {
        BERTH_ASSIGN_OR_RETURN(o, Merge(o, p, elem, depth + 1));
        found = true;
        break;
      }
    }
    if (!found) {
      BERTH_ASSIGN_OR_RETURN(json added, Merge(json::object(), p, elem, depth + 1));
      out.push_back(std::move(added));
    }
  }
  return out;
}

absl::StatusOr<json> Merge(const json& original, const json& patch, const api::Schema* schema, int depth) {
  if (depth > 64) return api::BadRequest("patch nested too deeply");
  if (!patch.is_object()) return patch;
  if (auto d = patch.find("$patch"); d != patch.end()) {
    if (*d == "replace") {
      json out = patch;
      out.erase("$patch");
      return out;
    }
    if (*d == "delete") return json();  // caller removes the key
    if (*d != "merge") return api::BadRequest(StrCat("strategic merge patch: unknown $patch directive ", d->dump()));
  }
  json out = original.is_object() ? original : json::object();
  std::optional<json> retain;
  for (const auto& [key, value] : patch.items()) {
    if (key == "$patch") continue;
    if (key == "$retainKeys") {
      retain = value;
      continue;
    }
    if (key.starts_with(kSetElementOrder)) continue;  // ordering hint only
    if (key.starts_with(kDeleteFromPrimitiveList)) {
      std::string field = key.substr(kDeleteFromPrimitiveList.size());
      if (out.contains(field) && out[field].is_array() && value.is_array()) {
        json kept = json::array();
        for (const auto& e : out[field]) {
          if (std::find(value.begin(), value.end(), e) == value.end()) kept.push_back(e);
        }
        out[field] = std::move(kept);
      }
      continue;
    }
    if (value.is_null()) {
      out.erase(key);
      continue;
    }
    const api::Schema* fs = Field(schema, key);
    if (value.is_object()) {
      BERTH_ASSIGN_OR_RETURN(json merged, Merge(out.contains(key) ? out[key] : json::object(), value, fs, depth + 1));
      if (merged.is_null()) {
        out.erase(key);
      } else {
        out[key] = std::move(merged);
      }
      continue;
    }
    if (value.is_array() && fs != nullptr && fs->type == api::Schema::Type::kArray) {
      if (!fs->merge_key.empty()) {
        BERTH_ASSIGN_OR_RETURN(out[key], MergeKeyedList(out.contains(key) ? out[key] : json::array(), value,
                                                        fs->elem.get(), fs->merge_key, depth));
        continue;
      }
      if (fs->merge_primitives) {
        json merged = out.contains(key) && out[key].is_array() ? out[key] : json::array();
        for (const auto& e : value) {
          if (std::find(merged.begin(), merged.end(), e) == merged.end()) merged.push_back(e);
        }
        out[key] = std::move(merged);
        continue;
      }
    }
    out[key] = value;
  }
  if (retain.has_value()) {
    if (!retain->is_array()) return api::BadRequest("strategic merge patch: $retainKeys must be a list");
    json kept = json::object();
    for (const auto& [k, v] : out.items()) {
      if (std::find(retain->begin(), retain->end(), k) != retain->end()) kept[k] = v;
    }
    out = std::move(kept);
  }
  return out;
}

}  // namespace

absl::StatusOr<PatchType> ParsePatchType(std::string_view content_type) {
  std::string_view ct = content_type.substr(0, content_type.find(';'));
  while (!ct.empty() && ct.back() == ' ') ct.remove_suffix(1);
  if (ct == "application/merge-patch+json") return PatchType::kMerge;
  if (ct == "application/json-patch+json") return PatchType::kJson;
  if (ct == "application/strategic-merge-patch+json") return PatchType::kStrategic;
  if (ct == "application/apply-patch+yaml") return PatchType::kApply;
  return api::UnsupportedMediaType(StrCat(
      "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, "
      "application/merge-patch+json, application/strategic-merge-patch+json (got \"",
      content_type, "\")"));
}

absl::StatusOr<json> ApplyPatch(const json& original, std::string_view patch_text, PatchType type,
                                const api::Schema& schema) {
  json patch = json::parse(patch_text, nullptr, /*allow_exceptions=*/false);
  if (patch.is_discarded()) return api::BadRequest("patch body is not valid JSON");
  switch (type) {
    case PatchType::kJson: {
      if (!patch.is_array()) return api::BadRequest("json patch must be a list of operations");
      try {
        // Kubernetes applies JSON patches with evanphx/json-patch v4, which
        // departs from RFC 6902 in one way clients rely on: "replace" of a
        // member missing from an existing object sets it (the external-
        // snapshotter replaces /metadata/annotations and /status of
        // VolumeSnapshotContents that have none). Operations apply in
        // order, each to the result of the last.
        json doc = original;
        for (const json& op : patch) {
          json step = op;
          if (op.is_object() && op.value("op", "") == "replace" && op.contains("path") && op["path"].is_string()) {
            const json::json_pointer target(op["path"].get<std::string>());
            if (!target.empty() && !doc.contains(target)) {
              const json::json_pointer parent = target.parent_pointer();
              if (doc.contains(parent) && doc.at(parent).is_object()) step["op"] = "add";
            }
          }
          doc = doc.patch(json::array({std::move(step)}));
        }
        return doc;
      } catch (const json::exception& e) {
        // "[json.exception.out_of_range.403] key 'x' not found" → the text.
        std::string what = e.what();
        if (size_t end = what.find("] "); what.starts_with("[json.exception") && end != std::string::npos) {
          what = what.substr(end + 2);
        }
        return api::Unprocessable(StrCat("the JSON patch does not apply: ", what));
      }
    }
    case PatchType::kMerge: {
      if (!patch.is_object()) return api::BadRequest("merge patch must be a JSON object");
      json out = original;
      out.merge_patch(patch);
      return out;
    }
    case PatchType::kStrategic: {
      if (!patch.is_object()) return api::BadRequest("strategic merge patch must be a JSON object");
      return Merge(original, patch, &schema, 0);
    }
    case PatchType::kApply:
      break;
  }
  return api::UnsupportedMediaType("server-side apply is not supported; use client-side apply (kubectl apply)");
}

}  // namespace berth::apiserver
