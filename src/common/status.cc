#include "common/status.h"

#include <cstring>
#include <string>

#include "common/strings.h"

namespace berth {

absl::Status ErrnoStatus(int err, std::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(err), StrCat(what, ": ", std::strerror(err)));
}

}  // namespace berth
