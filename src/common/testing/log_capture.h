// Test helper: routes spdlog's default logger into a string for the lifetime
// of the object, so tests can assert on what was (and was not) logged.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"

namespace berth::testing {

class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()), sink_(std::make_shared<StringSink>()) {
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(std::move(logger));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Everything logged so far.
  std::string text() const { return sink_->text(); }

 private:
  class StringSink final : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::string text() {
      std::lock_guard<std::mutex> lock(mutex_);
      return text_;
    }

   protected:
    // spdlog::sinks::base_sink
    void sink_it_(const spdlog::details::log_msg& msg) override {
      spdlog::memory_buf_t formatted;
      formatter_->format(msg, formatted);
      text_.append(formatted.data(), formatted.size());
    }
    void flush_() override {}

   private:
    std::string text_;
  };

  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<StringSink> sink_;
};

}  // namespace berth::testing
