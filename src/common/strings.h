// StrCat for berth code.
//
// Debian 12's abseil is built with its own absl::string_view (not an alias of
// std::string_view), so absl::StrCat does not accept std::string_view. berth's
// interfaces use std::string_view; this StrCat accepts it, plus strings,
// C strings, characters and numbers (formatted by fmt).
#pragma once

#include <concepts>
#include <string>
#include <string_view>

#include "fmt/format.h"

namespace berth {
namespace strings_internal {

inline void Append(std::string& out, std::string_view s) { out.append(s); }
inline void Append(std::string& out, const char* s) { out.append(s); }
inline void Append(std::string& out, char c) { out.push_back(c); }
template <typename T>
  requires(std::integral<T> || std::floating_point<T>) && (!std::same_as<T, char>)
void Append(std::string& out, T v) {
  fmt::format_to(std::back_inserter(out), "{}", v);
}

}  // namespace strings_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (strings_internal::Append(out, args), ...);
  return out;
}

}  // namespace berth
