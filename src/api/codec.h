// Manifests in and out: YAML (or JSON, which is YAML) to JSON objects, and
// JSON objects to YAML for `-o yaml`. Read with libyaml (the C parser
// go-yaml v2 was ported from), its events made into JSON directly; written
// with yaml-cpp's emitter.
//
// Scalars resolve the way Kubernetes' own YAML reader (sigs.k8s.io/yaml on
// go-yaml v2, YAML 1.1) resolves them: unquoted true/false/yes/no/on/off are
// booleans, unquoted numbers are numbers, null/~/empty is null, and anything
// quoted is a string. The encoder quotes every string that would otherwise
// read back as something else, so Decode(Encode(x)) == x.
#pragma once

#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace berth::api {

// Every non-empty document of a multi-document stream ("---" separated);
// `kind: List` (or any *List with items) is expanded into its items.
// INVALID_ARGUMENT with the parser's line and column for malformed input,
// or when a document is not a mapping.
absl::StatusOr<std::vector<nlohmann::json>> DecodeManifests(std::string_view text);

// A multi-document stream decoded as it is read (`berth apply -f` of a big
// file): each document is parsed when its end ("---" or the end of input)
// has been read, so memory holds one document rather than the stream. The
// checks and errors are DecodeManifests', made per document: a malformed
// document is reported when Next() reaches it, after those before it.
class ManifestReader {
 public:
  struct Document {
    int line = 1;                         // where the document starts
    std::vector<nlohmann::json> objects;  // none (empty document), one, or a List's items
  };
  explicit ManifestReader(std::istream& in) : in_(in) {}
  // The next document; nullopt at the end of the stream.
  absl::StatusOr<std::optional<Document>> Next();

 private:
  std::istream& in_;
  int line_ = 1;       // the number of the next line read
  size_t bytes_ = 0;   // bytes read (error offsets)
  size_t index_ = 0;   // documents returned ("document N" in errors)
  std::string carry_;  // content after a "--- " marker: the next document's
  int carry_line_ = 1;
  bool done_ = false;
};

// Block-style YAML of `value` (ends with a newline).
std::string EncodeYaml(const nlohmann::json& value);

}  // namespace berth::api
