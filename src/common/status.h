// Small helpers around absl::Status shared by every module.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace berth {

// A status for a failed system call: the code follows errno (ENOENT ->
// NOT_FOUND, EACCES -> PERMISSION_DENIED, ...), the message is
// "<what>: <strerror>".
absl::Status ErrnoStatus(int err, std::string_view what);

// Returns early from the enclosing function when `expr` is not OK.
#define BERTH_RETURN_IF_ERROR(expr)             \
  do {                                          \
    if (absl::Status _st = (expr); !_st.ok()) { \
      return _st;                               \
    }                                           \
  } while (0)

#define BERTH_CONCAT_INNER_(a, b) a##b
#define BERTH_CONCAT_(a, b) BERTH_CONCAT_INNER_(a, b)

// `BERTH_ASSIGN_OR_RETURN(auto x, Foo());` assigns the value of a StatusOr or
// returns its status from the enclosing function.
#define BERTH_ASSIGN_OR_RETURN(lhs, expr) BERTH_ASSIGN_OR_RETURN_IMPL_(BERTH_CONCAT_(_statusor_, __LINE__), lhs, expr)
#define BERTH_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

}  // namespace berth
