// StrCat for berth code.
//
// Debian 12's abseil is built with its own absl::string_view (not an alias of
// std::string_view), so absl::StrCat does not accept std::string_view. berth's
// interfaces use std::string_view; this StrCat accepts it, plus strings,
// absl::string_view (status messages), C strings, characters and numbers
// (formatted by fmt).
#pragma once

#include <concepts>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "fmt/format.h"

namespace berth {
namespace strings_internal {

inline void Append(std::string& out, std::string_view s) { out.append(s); }
inline void Append(std::string& out, const char* s) { out.append(s); }
inline void Append(std::string& out, absl::string_view s) { out.append(s.data(), s.size()); }
inline void Append(std::string& out, const std::string& s) { out.append(s); }
inline void Append(std::string& out, char c) { out.push_back(c); }
// clang-format 14 cannot lay out a requires clause.
// clang-format off
template <typename T>
  requires (std::integral<T> || std::floating_point<T>) && (!std::same_as<T, char>)
void Append(std::string& out, T v) {
  fmt::format_to(std::back_inserter(out), "{}", v);
}
// clang-format on

}  // namespace strings_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (strings_internal::Append(out, args), ...);
  return out;
}

// `s` without trailing whitespace (a command's output without its newline).
inline std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Splits `s` at every `sep` (empty pieces kept). The views point into `s`.
inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
}

}  // namespace berth
