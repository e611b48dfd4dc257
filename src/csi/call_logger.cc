#include "csi/call_logger.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "csi/redact.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "spdlog/spdlog.h"

namespace berth::csi {
namespace {

using grpc::experimental::InterceptionHookPoints;

// The protobuf descriptor of a gRPC method path such as
// "/csi.v1.Identity/Probe", or nullptr for a method not compiled in.
const google::protobuf::MethodDescriptor* FindMethod(const char* path) {
  if (path == nullptr || path[0] != '/') return nullptr;
  std::string full = absl::StrReplaceAll(path + 1, {{"/", "."}});
  return google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full);
}

class CallLogger final : public grpc::experimental::Interceptor {
 public:
  CallLogger(grpc::experimental::ServerRpcInfo* info, std::shared_ptr<InFlightCalls> in_flight, CallObserver* observer)
      : method_name_(info->method() ? info->method() : "?"),
        method_(FindMethod(info->method())),
        start_(absl::Now()),
        in_flight_(std::move(in_flight)),
        observer_(observer) {
    in_flight_->Started();
  }
  ~CallLogger() override { in_flight_->Finished(); }

  // grpc::experimental::Interceptor
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    const auto* logger = spdlog::default_logger_raw();
    // Rendering messages costs; skip it when nothing would be logged.
    const bool logging = logger->should_log(spdlog::level::warn);
    if (logging && method_ != nullptr) {
      // The messages are the method's own protobuf types: CsiServer only
      // serves generated (non-generic) services.
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
        if (const void* msg = methods->GetRecvMessage()) {
          request_ = RedactedDebugString(*static_cast<const google::protobuf::Message*>(msg));
        }
      }
      if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
        if (const void* msg = methods->GetSendMessage()) {
          response_ = RedactedDebugString(*static_cast<const google::protobuf::Message*>(msg));
        }
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      Log(methods->GetSendStatus());
    }
    methods->Proceed();
  }

 private:
  void Log(const grpc::Status& status) {
    const absl::Duration took = absl::Now() - start_;
    const char* code_name = StatusCodeName(status.error_code());
    if (observer_ != nullptr) observer_->CallFinished(method_name_, status.error_code(), took);
    if (status.ok()) {
      spdlog::info("csi call method={} code={} duration={} request={} response={}", method_name_, code_name,
                   absl::FormatDuration(took), request_, response_);
    } else {
      spdlog::warn("csi call method={} code={} duration={} message=\"{}\" request={}", method_name_, code_name,
                   absl::FormatDuration(took), status.error_message(), request_);
    }
  }

  const std::string method_name_;
  const google::protobuf::MethodDescriptor* const method_;
  const absl::Time start_;
  const std::shared_ptr<InFlightCalls> in_flight_;
  CallObserver* const observer_;
  std::string request_ = "{}";
  std::string response_ = "{}";
};

class CallLoggerFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  CallLoggerFactory(std::shared_ptr<InFlightCalls> in_flight, CallObserver* observer)
      : in_flight_(std::move(in_flight)), observer_(observer) {}

  // grpc::experimental::ServerInterceptorFactoryInterface
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new CallLogger(info, in_flight_, observer_);  // gRPC takes ownership.
  }

 private:
  const std::shared_ptr<InFlightCalls> in_flight_;
  CallObserver* const observer_;
};

}  // namespace

const char* StatusCodeName(grpc::StatusCode code) {
  static constexpr const char* kCodeNames[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  const int c = static_cast<int>(code);
  return (c >= 0 && c <= 16) ? kCodeNames[c] : "UNKNOWN_CODE";
}

void InFlightCalls::Started() {
  absl::MutexLock lock(&mu_);
  ++count_;
}

void InFlightCalls::Finished() {
  absl::MutexLock lock(&mu_);
  --count_;
}

int InFlightCalls::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

bool InFlightCalls::WaitForNone(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewCallLoggerFactory(
    std::shared_ptr<InFlightCalls> in_flight, CallObserver* observer) {
  return std::make_unique<CallLoggerFactory>(std::move(in_flight), observer);
}

}  // namespace berth::csi
