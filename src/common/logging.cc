#include "common/logging.h"

#include <string>

#include "common/strings.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace berth {

absl::Status InitLogging(std::string_view level) {
  const auto lvl = spdlog::level::from_str(std::string(level));
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (lvl == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        StrCat("unknown log level \"", level, "\" (want trace, debug, info, warn, error or off)"));
  }
  auto logger = spdlog::stderr_logger_mt("berth");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %^%L%$ %v", spdlog::pattern_time_type::utc);
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace berth
