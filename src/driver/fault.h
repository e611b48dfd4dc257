// Crash points for fault-injection tests.
//
// BERTH_CRASH_POINT("create-volume/image-in-place") marks a step after which
// a crash must leave a state that the next start (or the CO's retry)
// repairs. When the environment variable BERTH_CRASH_AT names that point, the
// process kills itself there with SIGKILL: no destructors, no flushing,
// nothing after that line runs. Tests start berth-csi with BERTH_CRASH_AT set,
// drive the RPC, restart it without, and check the outcome.
#pragma once

#include <string_view>

namespace berth::driver {

// Dies if BERTH_CRASH_AT names `point`.
void CrashPoint(std::string_view point);

}  // namespace berth::driver

#define BERTH_CRASH_POINT(name) ::berth::driver::CrashPoint(name)
