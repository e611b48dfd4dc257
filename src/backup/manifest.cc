#include "backup/manifest.h"

#include <algorithm>
#include <set>

#include "common/strings.h"

namespace berth::backup {
namespace {

using nlohmann::json;

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

bool Extent::WholeChunk(int64_t chunk_size, int64_t volume_size) const {
  return chunk_offset == 0 && chunk_size > 0 && offset % chunk_size == 0 &&
         length == std::min(chunk_size, volume_size - offset);
}

int64_t VolumeManifest::StoredBytes() const {
  int64_t total = 0;
  for (const Extent& e : extents) total += e.length;
  return total;
}

const VolumeManifest* Manifest::FindVolume(std::string_view volume_name) const {
  for (const VolumeManifest& v : volumes) {
    if (v.name == volume_name) return &v;
  }
  return nullptr;
}

absl::Status ValidateBackupName(std::string_view name) {
  if (name.empty() || name.size() > 253) {
    return absl::InvalidArgumentError(StrCat("backup name must be 1-253 characters, got ", name.size()));
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  if (!alnum(name[0])) {
    return absl::InvalidArgumentError(StrCat("backup name \"", name, "\" must start with a letter or digit"));
  }
  for (char c : name) {
    if (!alnum(c) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          StrCat("backup name \"", name, "\" may hold only letters, digits, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

bool IsValidChunkSize(int64_t chunk_size) {
  return IsPowerOfTwo(chunk_size) && chunk_size >= kMinChunkSize && chunk_size <= kMaxChunkSize;
}

bool IsChunkHash(std::string_view hash) {
  if (hash.size() != 64) return false;
  for (char c : hash) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::Status ValidateVolume(const VolumeManifest& v) {
  auto bad = [&v](std::string_view why) {
    return absl::InvalidArgumentError(StrCat("volume \"", v.name, "\": ", why));
  };
  if (v.name.empty()) return absl::InvalidArgumentError("volume with an empty name");
  if (v.size_bytes < 0) return bad("negative size");
  if (!IsValidChunkSize(v.chunk_size)) {
    return bad(
        StrCat("chunk size ", v.chunk_size, " is not a power of two in [", kMinChunkSize, ", ", kMaxChunkSize, "]"));
  }
  int64_t end = 0;
  for (const Extent& e : v.extents) {
    if (e.offset < end) return bad(StrCat("extent at ", e.offset, " overlaps or is out of order"));
    if (e.offset >= v.size_bytes) return bad(StrCat("extent at ", e.offset, " is beyond the volume's end"));
    if (e.length <= 0 || e.length > v.size_bytes - e.offset) {
      return bad(StrCat("extent at ", e.offset, " has length ", e.length, ", past the volume's end or empty"));
    }
    if (e.chunk_offset < 0 || e.length > v.chunk_size || e.chunk_offset > v.chunk_size - e.length) {
      return bad(StrCat("extent at ", e.offset, " names bytes [", e.chunk_offset, ", +", e.length,
                        ") of its chunk, outside a chunk of ", v.chunk_size));
    }
    if (!IsChunkHash(e.hash)) return bad(StrCat("extent at ", e.offset, " has a malformed chunk hash"));
    end = e.offset + e.length;
  }
  return absl::OkStatus();
}

namespace {

// Whether format 1 can say the volume: every extent a whole chunk.
bool IsWholeChunks(const VolumeManifest& v) {
  for (const Extent& e : v.extents) {
    if (!e.WholeChunk(v.chunk_size, v.size_bytes)) return false;
  }
  return true;
}

}  // namespace

std::string ManifestToJson(const Manifest& m) {
  int format = 1;
  json volumes = json::array();
  for (const VolumeManifest& v : m.volumes) {
    // Extents as [offset, length, hash] triples, a slice's with its offset
    // in the chunk as a fourth: a third of the size of objects (a 1 TiB
    // volume has a million of them).
    json extents = json::array();
    for (const Extent& e : v.extents) {
      extents.push_back(e.chunk_offset == 0 ? json::array({e.offset, e.length, e.hash})
                                            : json::array({e.offset, e.length, e.hash, e.chunk_offset}));
    }
    if (!IsWholeChunks(v)) format = 2;
    volumes.push_back({{"name", v.name},
                       {"size_bytes", v.size_bytes},
                       {"chunk_size", v.chunk_size},
                       {"base_backup", v.base_backup},
                       {"extents", std::move(extents)}});
  }
  json j = {{"format", format},     {"kind", "backup"},
            {"name", m.name},       {"created_unix_nanos", m.created_unix_nanos},
            {"objects", m.objects}, {"volumes", std::move(volumes)}};
  return j.dump() + "\n";
}

absl::StatusOr<Manifest> ManifestFromJson(std::string_view text, std::string_view expected_name) {
  Manifest m;
  try {
    const json j = json::parse(text);
    const int format = j.at("format").get<int>();
    if (format > kManifestFormat) {
      return absl::FailedPreconditionError(StrCat("backup \"", expected_name, "\" has manifest format ", format,
                                                  "; this berth reads up to ", kManifestFormat,
                                                  " (written by a newer berth?)"));
    }
    if (format < 1) throw std::invalid_argument(StrCat("format ", format));
    if (j.at("kind").get<std::string>() != "backup") throw std::invalid_argument("kind is not \"backup\"");
    m.name = j.at("name").get<std::string>();
    m.created_unix_nanos = j.at("created_unix_nanos").get<int64_t>();
    for (const json& o : j.at("objects")) m.objects.push_back(o);
    std::set<std::string> names;
    for (const json& jv : j.at("volumes")) {
      VolumeManifest v;
      v.name = jv.at("name").get<std::string>();
      v.size_bytes = jv.at("size_bytes").get<int64_t>();
      v.chunk_size = jv.at("chunk_size").get<int64_t>();
      v.base_backup = jv.at("base_backup").get<std::string>();
      for (const json& je : jv.at("extents")) {
        if (!je.is_array() || je.size() < 3 || je.size() > (format >= 2 ? 4 : 3)) {
          throw std::invalid_argument(format >= 2 ? "extent is not [offset, length, hash(, chunk offset)]"
                                                  : "extent is not [offset, length, hash]");
        }
        v.extents.push_back({je[0].get<int64_t>(), je[1].get<int64_t>(), je[2].get<std::string>(),
                             je.size() == 4 ? je[3].get<int64_t>() : 0});
      }
      if (format == 1 && !IsWholeChunks(v)) {
        throw std::invalid_argument(StrCat("volume \"", v.name, "\" has an extent that is not a whole chunk"));
      }
      if (!names.insert(v.name).second) throw std::invalid_argument(StrCat("volume \"", v.name, "\" twice"));
      m.volumes.push_back(std::move(v));
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(
        StrCat("manifest of backup \"", expected_name, "\" is malformed or truncated: ", e.what()));
  }
  if (m.name != expected_name) {
    return absl::DataLossError(
        StrCat("manifest of backup \"", expected_name, "\" names another backup, \"", m.name, "\""));
  }
  for (const VolumeManifest& v : m.volumes) {
    if (absl::Status st = ValidateVolume(v); !st.ok()) {
      return absl::DataLossError(StrCat("manifest of backup \"", expected_name, "\": ", st.message()));
    }
  }
  return m;
}

}  // namespace berth::backup
