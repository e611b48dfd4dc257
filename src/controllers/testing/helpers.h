// Small helpers every controller test uses.
#pragma once

#include <string_view>

#include "api/kinds.h"
#include "common/testing/eventually.h"

namespace berth::controllers::testing {

// The kind behind a resource ("persistentvolumeclaims", group "" = core).
inline const api::KindInfo& K(std::string_view resource, std::string_view group = "") {
  return *api::FindResource(group, resource);
}

// Controllers converge asynchronously: poll `pred` for up to `timeout`.
template <class Pred>
bool Eventually(Pred pred, absl::Duration timeout = absl::Seconds(15)) {
  return berth::testing::Eventually(pred, timeout);
}

}  // namespace berth::controllers::testing
