// Termination signals for servers: block SIGTERM/SIGINT in every thread and
// wait for them synchronously in one place.
#pragma once

#include "absl/time/time.h"

namespace berth {

// Blocks SIGTERM and SIGINT in the calling thread. Call first thing in
// main(), before any thread exists, so every thread inherits the mask and the
// signals are only ever consumed by WaitForTerminationSignal().
void BlockTerminationSignals();

// Waits until SIGTERM or SIGINT arrives; returns its number.
int WaitForTerminationSignal();
// Waits up to `timeout` for SIGTERM or SIGINT; its number, or 0 if none came.
int WaitForTerminationSignal(absl::Duration timeout);

}  // namespace berth
