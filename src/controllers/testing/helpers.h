// Small helpers every controller test uses.
#pragma once

#include <string_view>

#include "api/kinds.h"
#include "client/object.h"
#include "common/testing/eventually.h"

namespace berth::controllers::testing {

using client::K;

// Controllers converge asynchronously: poll `pred` for up to `timeout`.
template <class Pred>
bool Eventually(Pred pred, absl::Duration timeout = absl::Seconds(15)) {
  return berth::testing::Eventually(pred, timeout);
}

}  // namespace berth::controllers::testing
