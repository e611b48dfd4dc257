// Small helpers every controller test uses.
#pragma once

#include <string_view>

#include "api/kinds.h"
#include "apiserver/registry.h"
#include "client/object.h"
#include "client/testing/settle.h"
#include "common/testing/eventually.h"

namespace berth::controllers::testing {

using client::K;
// Waits until informers, queues and event recorders have nothing left to do
// (client/testing/settle.h): the way to assert that something does NOT happen.
using berth::testing::Settle;

// Controllers converge asynchronously: poll `pred` for up to `timeout`.
template <class Pred>
bool Eventually(Pred pred, absl::Duration timeout = absl::Seconds(15)) {
  return berth::testing::Eventually(pred, timeout);
}

// Deletes a pod as its node agent finally does once it has stopped it and
// torn its volumes down (grace period 0): no node agent runs in these tests,
// and a plain delete of a scheduled pod only marks it Terminating.
inline apiserver::DeleteOptions PodGone() {
  apiserver::DeleteOptions o;
  o.grace_period_seconds = 0;
  return o;
}

}  // namespace berth::controllers::testing
