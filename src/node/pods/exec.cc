#include "node/pods/exec.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "api/errors.h"
#include "client/object.h"
#include "common/fd.h"
#include "common/status.h"
#include "common/strings.h"
#include "node/pods/logs.h"
#include "node/pods/runtime_pod.h"
#include "spdlog/spdlog.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;

// The streaming server's answer, when not 101, is relayed up to this size.
constexpr size_t kMaxRefusal = 64 << 10;
constexpr size_t kMaxHead = 64 << 10;

bool QueryBool(const std::string& value) { return value == "true" || value == "1" || value == "True"; }

std::vector<std::string> SplitList(std::string_view joined) {
  std::vector<std::string> out;
  for (std::string_view part : Split(joined, ',')) {
    std::string v(absl::StripAsciiWhitespace(absl::string_view(part.data(), part.size())));
    if (!v.empty()) out.push_back(std::move(v));
  }
  return out;
}

// Waits for `events` on `fd` until `deadline`: DEADLINE_EXCEEDED after it.
absl::Status WaitFor(int fd, short events, absl::Time deadline, std::string_view what) {
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError(StrCat("the runtime's streaming server: timed out ", what));
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1000)));
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return ErrnoStatus(errno, "poll");
  }
}

absl::StatusOr<int> Dial(const StreamUrl& url, absl::Time deadline) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (url.ipv6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(url.port));
    if (::inet_pton(AF_INET6, url.host.c_str(), &a->sin6_addr) != 1)
      return absl::InvalidArgumentError(StrCat("bad address ", url.host));
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(url.port));
    if (::inet_pton(AF_INET, url.host.c_str(), &a->sin_addr) != 1)
      return absl::InvalidArgumentError(StrCat("bad address ", url.host));
    len = sizeof(*a);
  }
  Fd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return ErrnoStatus(errno, "socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    if (errno != EINPROGRESS) return ErrnoStatus(errno, StrCat("connect to the runtime's streaming server ", url.host));
    BERTH_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, "connecting"));
    int err = 0;
    socklen_t err_len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &err_len);
    if (err != 0) return ErrnoStatus(err, StrCat("connect to the runtime's streaming server ", url.host));
  }
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd.release();
}

absl::Status SendAll(int fd, std::string_view bytes, absl::Time deadline) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return ErrnoStatus(errno, "send to the runtime's streaming server");
    BERTH_RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, "sending"));
  }
  return absl::OkStatus();
}

// Appends what arrives (at most `max` bytes in all) until `enough` says so,
// EOF (false) or the deadline.
absl::StatusOr<bool> ReadUntil(int fd, std::string& buf, size_t max, absl::Time deadline,
                               const std::function<bool()>& enough) {
  char chunk[8192];
  while (!enough()) {
    if (buf.size() >= max) return absl::ResourceExhaustedError("the runtime's streaming server answered too much");
    const ssize_t n = ::recv(fd, chunk, std::min(sizeof(chunk), max - buf.size()), 0);
    if (n > 0) {
      buf.append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno != EAGAIN && errno != EINTR) return ErrnoStatus(errno, "read from the runtime's streaming server");
    BERTH_RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, "waiting for its answer"));
  }
  return true;
}

// The running container `container` of `pod` on its node's runtime.
absl::StatusOr<std::string> RunningContainerId(cri::Runtime& runtime, const json& pod, const std::string& container) {
  cri::v1::ContainerFilter filter;
  (*filter.mutable_label_selector())[kPodUidLabel] = client::Field(pod, "metadata").value("uid", "");
  (*filter.mutable_label_selector())[kContainerNameLabel] = container;
  filter.mutable_state()->set_state(cri::v1::CONTAINER_RUNNING);
  BERTH_ASSIGN_OR_RETURN(auto found, runtime.ListContainers(filter));
  if (found.empty()) return absl::NotFoundError(StrCat("container not found (\"", container, "\")"));
  // Newest first, should an old instance linger.
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.created_at() > b.created_at(); });
  return found.front().id();
}

// An error of the node's side, worded and sent as kubelet does: plain
// text, which kubectl prints after "unable to upgrade connection: ".
void SendNodeError(http::ResponseWriter& out, const absl::Status& st) {
  int code = 500;
  if (st.code() == absl::StatusCode::kNotFound) code = 404;
  if (st.code() == absl::StatusCode::kInvalidArgument) code = 400;
  if (st.code() == absl::StatusCode::kDeadlineExceeded) code = 504;
  if (st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kFailedPrecondition) code = 503;
  out.Send(code, "text/plain; charset=utf-8", StrCat(st.message(), "\n"));
}

}  // namespace

absl::StatusOr<StreamRequest> ParseStreamRequest(std::string_view subresource, std::string_view raw_query) {
  StreamRequest r;
  r.attach = subresource == "attach";
  for (auto& [key, value] : http::ParseQueryList(raw_query)) {
    if (key == "command") {
      r.command.push_back(value);
    } else if (key == "container") {
      r.container = value;
    } else if (key == "stdin") {
      r.stdin = QueryBool(value);
    } else if (key == "stdout") {
      r.stdout = QueryBool(value);
    } else if (key == "stderr") {
      r.stderr = QueryBool(value);
    } else if (key == "tty") {
      r.tty = QueryBool(value);
    }
  }
  // kube-apiserver's validation of PodExecOptions / PodAttachOptions.
  if (!r.attach && r.command.empty()) return api::BadRequest("you must specify at least one command for the container");
  if (r.attach && !r.command.empty()) return api::BadRequest("command is not supported by attach");
  if (!r.stdin && !r.stdout && !r.stderr)
    return api::BadRequest("you must specify at least 1 of stdin, stdout, stderr");
  // With a terminal there is one output stream (the CRI's rule); kubectl
  // asks for stderr false itself.
  if (r.tty) r.stderr = false;
  return r;
}

absl::StatusOr<StreamUrl> ParseStreamUrl(std::string_view url) {
  constexpr std::string_view kHttp = "http://";
  if (!absl::StartsWith(absl::string_view(url.data(), url.size()), "http://")) {
    return absl::InvalidArgumentError(
        StrCat("the runtime's streaming URL \"", url, "\" is not http:// (a TLS streaming server is not supported)"));
  }
  std::string_view rest = url.substr(kHttp.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  StreamUrl out;
  out.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  auto addr = http::ParseTcpAddress(authority);
  if (!addr.ok() || addr->port == 0) {
    return absl::InvalidArgumentError(StrCat("the runtime's streaming URL \"", url, "\" has no IP address and port"));
  }
  out.host = addr->host;
  out.port = addr->port;
  out.ipv6 = addr->ipv6;
  return out;
}

std::string UpstreamRequest(const http::HttpRequest& client, const StreamUrl& url) {
  std::string host = url.ipv6 ? StrCat("[", url.host, "]:", url.port) : StrCat(url.host, ":", url.port);
  std::string out = StrCat(client.method, " ", url.target, " HTTP/1.1\r\nHost: ", host, "\r\n");
  // Only the upgrade's own headers travel; X-Stream-Protocol-Version one
  // line per value (older servers read only separate lines).
  for (const char* name : {"connection", "upgrade", "sec-websocket-key", "sec-websocket-version",
                           "sec-websocket-protocol", "sec-websocket-extensions"}) {
    const std::string value = client.Header(name);
    if (!value.empty()) out += StrCat(name, ": ", value, "\r\n");
  }
  for (const std::string& v : SplitList(client.Header("x-stream-protocol-version"))) {
    out += StrCat("X-Stream-Protocol-Version: ", v, "\r\n");
  }
  if (client.method == "POST") out += "Content-Length: 0\r\n";
  return out + "\r\n";
}

absl::StatusOr<UpstreamHead> ParseUpstreamHead(std::string_view bytes) {
  const size_t end = bytes.find("\r\n\r\n");
  if (end == std::string_view::npos) return absl::NotFoundError("incomplete response head");
  UpstreamHead head;
  head.size = end + 4;
  std::string_view lines = bytes.substr(0, end);
  const size_t eol = lines.find("\r\n");
  std::string_view status = lines.substr(0, eol);
  // "HTTP/1.1 101 Switching Protocols"
  if (!absl::StartsWith(absl::string_view(status.data(), status.size()), "HTTP/1.") || status.size() < 12 ||
      status[8] != ' ' || !absl::SimpleAtoi(absl::string_view(status.data() + 9, 3), &head.code) || head.code < 100 ||
      head.code > 599) {
    return absl::InvalidArgumentError(StrCat("not an HTTP response: \"", status.substr(0, 64), "\""));
  }
  std::string_view rest = eol == std::string_view::npos ? std::string_view() : lines.substr(eol + 2);
  for (std::string_view line : Split(rest, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) continue;
    std::string name(line.substr(0, colon));
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value(absl::StripAsciiWhitespace(absl::string_view(line.data() + colon + 1, line.size() - colon - 1)));
    auto [it, fresh] = head.headers.try_emplace(name, value);
    if (!fresh) it->second += StrCat(", ", value);
  }
  return head;
}

absl::Status ServePodStream(apiserver::Api& registry, const RuntimeForNode& runtimes, std::string_view subresource,
                            const std::string& ns, const std::string& name, const http::HttpRequest& request,
                            http::ResponseWriter& out, const StreamOptions& options) {
  const absl::Time deadline = absl::Now() + options.handshake_timeout;
  // kube-apiserver's checks, in its order.
  const size_t q = request.target.find('?');
  BERTH_ASSIGN_OR_RETURN(StreamRequest want,
                         ParseStreamRequest(subresource, q == std::string::npos ? "" : request.target.substr(q + 1)));
  BERTH_ASSIGN_OR_RETURN(json pod, registry.Get(client::K("pods"), ns, name));
  BERTH_ASSIGN_OR_RETURN(std::string container, RequestedContainer(pod, name, want.container));
  const std::string node = client::Field(pod, "spec").value("nodeName", "");
  if (node.empty()) return api::BadRequest(StrCat("pod ", name, " does not have a host assigned"));
  if (absl::AsciiStrToLower(request.Header("connection")).find("upgrade") == std::string::npos) {
    return api::BadRequest("Upgrade request required");
  }

  // kubelet's part, on the pod's node.
  absl::StatusOr<cri::Runtime*> runtime = runtimes(node);
  if (!runtime.ok()) {
    SendNodeError(out, absl::Status(runtime.status().code(),
                                    StrCat("node ", node, " runs no container runtime: ", runtime.status().message())));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> id = RunningContainerId(**runtime, pod, container);
  absl::StatusOr<std::string> url = absl::UnknownError("");
  if (!id.ok()) {
    url = id.status();
  } else if (want.attach) {
    cri::v1::AttachRequest r;
    r.set_container_id(*id);
    r.set_stdin(want.stdin);
    r.set_tty(want.tty);
    r.set_stdout(want.stdout);
    r.set_stderr(want.stderr);
    url = (*runtime)->Attach(r);
  } else {
    cri::v1::ExecRequest r;
    r.set_container_id(*id);
    for (const auto& c : want.command) r.add_cmd(c);
    r.set_tty(want.tty);
    r.set_stdin(want.stdin);
    r.set_stdout(want.stdout);
    r.set_stderr(want.stderr);
    url = (*runtime)->Exec(r);
  }
  absl::StatusOr<StreamUrl> target = url.ok() ? ParseStreamUrl(*url) : absl::StatusOr<StreamUrl>(url.status());
  absl::StatusOr<int> dialed = target.ok() ? Dial(*target, deadline) : absl::StatusOr<int>(target.status());
  if (!dialed.ok()) {
    SendNodeError(out, dialed.status());
    return absl::OkStatus();
  }
  Fd upstream(*dialed);
  std::string buf;
  absl::StatusOr<UpstreamHead> head = absl::NotFoundError("");
  absl::Status st = SendAll(upstream.get(), UpstreamRequest(request, *target), deadline);
  if (st.ok()) {
    auto whole = ReadUntil(upstream.get(), buf, kMaxHead, deadline, [&] {
      return (head = ParseUpstreamHead(buf)).status().code() != absl::StatusCode::kNotFound;
    });
    if (!whole.ok()) st = whole.status();
    if (st.ok() && !*whole) st = absl::UnavailableError("the runtime's streaming server closed the connection");
    if (st.ok() && !head.ok()) st = head.status();
  }
  if (!st.ok()) {
    SendNodeError(out, st);
    return absl::OkStatus();
  }
  if (head->code == 101) {
    spdlog::debug("pods/{} {}/{} container {}: streaming through {}:{}", subresource, ns, name, container, target->host,
                  target->port);
    out.Tunnel(std::move(buf), upstream.release());
    return absl::OkStatus();
  }
  // A refusal (a protocol the runtime does not speak, an error of its own):
  // relayed as it is, as kube-apiserver's proxy does.
  size_t length = kMaxRefusal;
  if (auto it = head->headers.find("content-length"); it != head->headers.end()) {
    if (!absl::SimpleAtoi(it->second, &length)) length = 0;
  }
  length = std::min(length, kMaxRefusal);
  const size_t head_size = head->size;
  (void)ReadUntil(upstream.get(), buf, head_size + length, deadline, [&] { return buf.size() >= head_size + length; });
  auto type = head->headers.find("content-type");
  out.Send(head->code, type == head->headers.end() ? "text/plain; charset=utf-8" : type->second,
           buf.substr(std::min(head_size, buf.size())));
  return absl::OkStatus();
}

}  // namespace berth::node::pods
