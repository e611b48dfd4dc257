// Process-wide logging setup on spdlog.
//
// berth logs through spdlog's default logger (spdlog::info(...) and friends).
// Binaries call InitLogging() once from main(); tests may replace the default
// logger with one writing to a string to assert on what was (not) logged.
//
// Never pass a secret to a log call: CSI messages are logged only through
// csi::RedactedDebugString(), which strips every field marked csi_secret.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace berth {

// Sets up the default logger on stderr with the given level name
// ("trace", "debug", "info", "warn", "error", "off").
// INVALID_ARGUMENT for an unknown level name.
absl::Status InitLogging(std::string_view level);

}  // namespace berth
