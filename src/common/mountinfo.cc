#include "common/mountinfo.h"

#include <string_view>

#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth {
namespace {

// Undoes mountinfo's octal escapes (\040 for space, ...).
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const char a = s[i + 1], b = s[i + 2], c = s[i + 3];
      if (a >= '0' && a <= '7' && b >= '0' && b <= '7' && c >= '0' && c <= '7') {
        out.push_back(static_cast<char>((a - '0') * 64 + (b - '0') * 8 + (c - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

bool MountEntry::read_only() const {
  for (std::string_view o : Split(options, ',')) {
    if (o == "ro") return true;
  }
  return false;
}

absl::StatusOr<std::vector<MountEntry>> ParseMountInfo(const std::string& text) {
  std::vector<MountEntry> out;
  for (std::string_view line : Split(text, '\n')) {
    if (line.empty()) continue;
    std::vector<std::string_view> f = Split(line, ' ');
    // id parent major:minor root mountpoint options [optional...] - fstype source superoptions
    size_t dash = 0;
    for (size_t i = 6; i < f.size(); ++i) {
      if (f[i] == "-") {
        dash = i;
        break;
      }
    }
    if (f.size() < 10 || dash == 0 || dash + 2 >= f.size()) {
      return absl::DataLossError(StrCat("malformed mountinfo line: ", std::string(line)));
    }
    MountEntry e;
    std::string_view dev = f[2];
    size_t colon = dev.find(':');
    if (colon != std::string_view::npos) {
      e.major = static_cast<unsigned>(std::stoul(std::string(dev.substr(0, colon))));
      e.minor = static_cast<unsigned>(std::stoul(std::string(dev.substr(colon + 1))));
    }
    e.root = Unescape(f[3]);
    e.target = Unescape(f[4]);
    e.options = std::string(f[5]);
    e.fs_type = std::string(f[dash + 1]);
    e.source = Unescape(f[dash + 2]);
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<MountEntry>> ReadMountTable() {
  BERTH_ASSIGN_OR_RETURN(std::string text, ReadFile("/proc/self/mountinfo"));
  return ParseMountInfo(text);
}

}  // namespace berth
