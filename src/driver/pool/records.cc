#include "driver/pool/records.h"

#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace berth::driver {
namespace {

using nlohmann::json;

const char* AccessName(AccessType t) { return t == AccessType::kBlock ? "block" : "mount"; }

AccessType AccessFromName(const std::string& s) {
  if (s == "block") return AccessType::kBlock;
  if (s == "mount") return AccessType::kMount;
  throw std::invalid_argument("access_type must be \"mount\" or \"block\"");
}

// Parses `text` as a record of `kind` and checks its format version; the
// decoder runs on the result. Exceptions from nlohmann stay in this file.
template <typename T, typename Decode>
absl::StatusOr<T> Parse(const std::string& text, std::string_view kind, Decode decode) {
  try {
    json j = json::parse(text);
    const int format = j.at("format").get<int>();
    if (format > kRecordFormat) {
      return absl::FailedPreconditionError(StrCat(kind, " record has format ", format,
                                                  "; this berth-csi understands up to ", kRecordFormat,
                                                  " (was the pool written by a newer version?)"));
    }
    if (j.at("kind").get<std::string>() != kind) {
      return absl::DataLossError(StrCat("record is not a ", kind));
    }
    return decode(j);
  } catch (const std::exception& e) {
    return absl::DataLossError(StrCat("malformed ", kind, " record: ", e.what()));
  }
}

}  // namespace

std::string ToJson(const VolumeRecord& r) {
  json pubs = json::array();
  for (const auto& p : r.publications) pubs.push_back({{"node_id", p.node_id}, {"readonly", p.readonly}});
  json targets = json::array();
  for (const auto& t : r.targets) targets.push_back({{"path", t.path}, {"readonly", t.readonly}});
  json j = {{"format", kRecordFormat},
            {"kind", "volume"},
            {"id", r.id},
            {"name", r.name},
            {"capacity_bytes", r.capacity_bytes},
            {"access_type", AccessName(r.access_type)},
            {"fs_type", r.fs_type},
            {"parameters", r.parameters},
            {"source_snapshot_id", r.source_snapshot_id},
            {"source_volume_id", r.source_volume_id},
            {"created_unix_nanos", r.created_unix_nanos},
            {"publications", pubs},
            {"staging_path", r.staging_path},
            {"block_device", r.block_device},
            {"targets", targets},
            {"formatting", r.formatting},
            {"formatted", r.formatted},
            {"fs_bytes", r.fs_bytes},
            {"deleting", r.deleting}};
  return j.dump(2) + "\n";
}

std::string ToJson(const SnapshotRecord& r) {
  json j = {{"format", kRecordFormat},
            {"kind", "snapshot"},
            {"id", r.id},
            {"name", r.name},
            {"source_volume_id", r.source_volume_id},
            {"size_bytes", r.size_bytes},
            {"access_type", AccessName(r.access_type)},
            {"fs_type", r.fs_type},
            {"parameters", r.parameters},
            {"group_snapshot_id", r.group_snapshot_id},
            {"created_unix_nanos", r.created_unix_nanos},
            {"formatted", r.formatted},
            {"deleting", r.deleting}};
  return j.dump(2) + "\n";
}

std::string ToJson(const GroupSnapshotRecord& r) {
  json j = {{"format", kRecordFormat},
            {"kind", "group_snapshot"},
            {"id", r.id},
            {"name", r.name},
            {"source_volume_ids", r.source_volume_ids},
            {"snapshot_ids", r.snapshot_ids},
            {"parameters", r.parameters},
            {"created_unix_nanos", r.created_unix_nanos}};
  return j.dump(2) + "\n";
}

absl::StatusOr<VolumeRecord> VolumeFromJson(const std::string& text) {
  return Parse<VolumeRecord>(text, "volume", [](const json& j) {
    VolumeRecord r;
    r.id = j.at("id").get<std::string>();
    r.name = j.at("name").get<std::string>();
    r.capacity_bytes = j.at("capacity_bytes").get<int64_t>();
    r.access_type = AccessFromName(j.at("access_type").get<std::string>());
    r.fs_type = j.at("fs_type").get<std::string>();
    r.parameters = j.at("parameters").get<std::map<std::string, std::string>>();
    r.source_snapshot_id = j.at("source_snapshot_id").get<std::string>();
    r.source_volume_id = j.at("source_volume_id").get<std::string>();
    r.created_unix_nanos = j.at("created_unix_nanos").get<int64_t>();
    for (const auto& p : j.at("publications")) {
      r.publications.push_back({p.at("node_id").get<std::string>(), p.at("readonly").get<bool>()});
    }
    r.staging_path = j.at("staging_path").get<std::string>();
    r.block_device = j.at("block_device").get<std::string>();
    for (const auto& t : j.at("targets")) {
      r.targets.push_back({t.at("path").get<std::string>(), t.at("readonly").get<bool>()});
    }
    r.formatting = j.at("formatting").get<bool>();
    r.formatted = j.at("formatted").get<bool>();
    r.fs_bytes = j.at("fs_bytes").get<int64_t>();
    r.deleting = j.at("deleting").get<bool>();
    return r;
  });
}

absl::StatusOr<SnapshotRecord> SnapshotFromJson(const std::string& text) {
  return Parse<SnapshotRecord>(text, "snapshot", [](const json& j) {
    SnapshotRecord r;
    r.id = j.at("id").get<std::string>();
    r.name = j.at("name").get<std::string>();
    r.source_volume_id = j.at("source_volume_id").get<std::string>();
    r.size_bytes = j.at("size_bytes").get<int64_t>();
    r.access_type = AccessFromName(j.at("access_type").get<std::string>());
    r.fs_type = j.at("fs_type").get<std::string>();
    r.parameters = j.at("parameters").get<std::map<std::string, std::string>>();
    r.group_snapshot_id = j.at("group_snapshot_id").get<std::string>();
    r.created_unix_nanos = j.at("created_unix_nanos").get<int64_t>();
    r.formatted = j.at("formatted").get<bool>();
    r.deleting = j.at("deleting").get<bool>();
    return r;
  });
}

absl::StatusOr<GroupSnapshotRecord> GroupSnapshotFromJson(const std::string& text) {
  return Parse<GroupSnapshotRecord>(text, "group_snapshot", [](const json& j) {
    GroupSnapshotRecord r;
    r.id = j.at("id").get<std::string>();
    r.name = j.at("name").get<std::string>();
    r.source_volume_ids = j.at("source_volume_ids").get<std::vector<std::string>>();
    r.snapshot_ids = j.at("snapshot_ids").get<std::vector<std::string>>();
    r.parameters = j.at("parameters").get<std::map<std::string, std::string>>();
    r.created_unix_nanos = j.at("created_unix_nanos").get<int64_t>();
    return r;
  });
}

}  // namespace berth::driver
