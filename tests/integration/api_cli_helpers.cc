// Helpers of the API tests (declared in api_cli_fixture.h).
#include "api_cli_fixture.h"

namespace berth::api_cli_testing {

std::string FirstExecutable(const std::vector<std::string>& candidates) {
  for (const auto& c : candidates) {
    std::error_code ec;  // unreadable directories on PATH are no error
    if (!c.empty() && fs::is_regular_file(c, ec) && ::access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::vector<std::string> candidates;
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (!dir.empty()) candidates.push_back(absl::StrCat(dir, "/", name));
  }
  return FirstExecutable(candidates);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) out.emplace_back(line);
  return out;
}

std::vector<std::string> HeaderColumns(const std::string& header) {
  std::vector<std::string> out;
  static const std::regex kGap(" {2,}");
  for (std::sregex_token_iterator it(header.begin(), header.end(), kGap, -1), end; it != end; ++it) {
    std::string column = *it;
    while (!column.empty() && column.back() == ' ') column.pop_back();
    if (!column.empty()) out.push_back(column);
  }
  return out;
}

std::vector<std::string> Fields(const std::string& row) {
  std::vector<std::string> out;
  for (absl::string_view f : absl::StrSplit(row, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) out.emplace_back(f);
  return out;
}

std::vector<json> JsonStream(const std::string& text) {
  std::vector<json> out;
  int depth = 0;
  bool in_string = false, escaped = false;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      if (depth++ == 0) start = i;
    } else if (c == '}' && depth > 0 && --depth == 0) {
      json value = json::parse(text.substr(start, i - start + 1), nullptr, false);
      if (value.is_object()) out.push_back(std::move(value));
    }
  }
  return out;
}

int OpenServerConnections(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  int open = 0;
  while (std::getline(in, line)) {
    // "  0: 0100007F:8CA1 0100007F:D2F4 01 ..." (hex port, hex state)
    const std::vector<std::string> f = Fields(line);
    if (f.size() < 4) continue;
    const size_t colon = f[1].rfind(':');
    if (colon == std::string::npos) continue;
    const int local_port = static_cast<int>(std::strtol(f[1].c_str() + colon + 1, nullptr, 16));
    if (local_port == port && (f[3] == "01" || f[3] == "08")) ++open;
  }
  return open;
}

std::string LabelsYaml(const std::map<std::string, std::string>& labels) {
  if (labels.empty()) return "";
  std::string out = "  labels:\n";
  for (const auto& [k, v] : labels) absl::StrAppend(&out, "    ", k, ": \"", v, "\"\n");
  return out;
}

std::string StorageClassYaml(const std::map<std::string, std::string>& labels) {
  return absl::StrCat("apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: fast\n",
                      LabelsYaml(labels), "provisioner: local.csi.berth.io\n");
}

std::string ClaimYaml(const std::string& name, const std::map<std::string, std::string>& labels) {
  return absl::StrCat("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: ", name, "\n",
                      LabelsYaml(labels),
                      "spec:\n  storageClassName: fast\n  accessModes: [ReadWriteOnce]\n"
                      "  resources:\n    requests:\n      storage: 1Gi\n");
}

std::string SnapshotYaml(const std::map<std::string, std::string>& labels) {
  return absl::StrCat("apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: snap\n",
                      LabelsYaml(labels),
                      "spec:\n  volumeSnapshotClassName: snapclass\n  source:\n    persistentVolumeClaimName: data\n");
}

}  // namespace berth::api_cli_testing
