#include "node/plugins/plugin_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/str_join.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "csi/client.h"
#include "grpcpp/client_context.h"
#include "pluginregistration/v1/api.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace berth::node {
namespace {

namespace fs = std::filesystem;

// "v1.2.3" / "1.2" / "1" → {1, 2, 3}; nullopt when not a version.
std::optional<std::vector<int>> ParseVersion(std::string_view v) {
  if (!v.empty() && (v[0] == 'v' || v[0] == 'V')) v.remove_prefix(1);
  std::vector<int> parts;
  for (std::string_view p : Split(v, '.')) {
    if (p.empty() || p.size() > 6) return std::nullopt;
    int n = 0;
    for (char c : p) {
      if (c < '0' || c > '9') return std::nullopt;
      n = n * 10 + (c - '0');
    }
    parts.push_back(n);
  }
  if (parts.empty() || parts.size() > 3) return std::nullopt;
  while (parts.size() < 3) parts.push_back(0);
  return parts;
}

}  // namespace

absl::Status CheckCsiVersions(const std::vector<std::string>& versions) {
  if (versions.empty()) return absl::InvalidArgumentError("the plugin reports no supported versions");
  std::optional<std::vector<int>> best;
  for (const auto& text : versions) {
    auto v = ParseVersion(text);
    if (!v || (*v)[0] > 1) continue;  // unparsable or a future major version
    if (!best || *best < *v) best = v;
  }
  if (!best || (*best)[0] < 1) {
    return absl::InvalidArgumentError(
        StrCat("none of the plugin's versions [", absl::StrJoin(versions, ", "), "] is a CSI 1.x version"));
  }
  return absl::OkStatus();
}

PluginWatcher::PluginWatcher(std::string dir, PluginHandler& handler, Options options)
    : dir_(std::move(dir)),
      handler_(handler),
      options_(options),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()),
      retry_backoff_({.base = absl::Milliseconds(500), .max = options_.max_retry, .jitter = 0}) {}

PluginWatcher::~PluginWatcher() { Stop(); }

absl::Status PluginWatcher::Start() {
  BERTH_RETURN_IF_ERROR(MakeDirs(dir_, 0750));
  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) return ErrnoStatus(errno, "inotify_init1");
  if (::inotify_add_watch(inotify_fd_, dir_.c_str(), IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB) <
      0) {
    absl::Status st = ErrnoStatus(errno, StrCat("watch ", dir_));
    ::close(inotify_fd_);
    inotify_fd_ = -1;
    return st;
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    absl::Status st = ErrnoStatus(errno, "eventfd");
    ::close(inotify_fd_);
    inotify_fd_ = -1;
    return st;
  }
  stopping_.store(false);
  thread_ = NamedThread("plugin watcher", [this] { Run(); });
  return absl::OkStatus();
}

void PluginWatcher::Stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  timer_.Reset();
  ::close(inotify_fd_);
  ::close(wake_fd_);
  inotify_fd_ = wake_fd_ = -1;
}

std::map<std::string, std::string> PluginWatcher::Registered() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::string> out;
  for (const auto& [socket, p] : plugins_) out[socket] = p.name;
  return out;
}

void PluginWatcher::Run() {
  for (;;) {
    Rescan();
    scans_.fetch_add(1);
    // Sleep until something changes in the directory, a retry is due, or
    // the periodic rescan (a timer on the clock writes the eventfd).
    absl::Time next = clock_.Now() + options_.rescan;
    for (const auto& [socket, r] : retries_) next = std::min(next, r.next);
    timer_.Set(clock_, next, [this] {
      const uint64_t one = 1;
      (void)!::write(wake_fd_, &one, sizeof(one));
    });
    pollfd fds[2] = {{.fd = inotify_fd_, .events = POLLIN, .revents = 0},
                     {.fd = wake_fd_, .events = POLLIN, .revents = 0}};
    const int rc = ::poll(fds, 2, -1);
    if (stopping_.load()) return;
    if (rc > 0 && (fds[1].revents & POLLIN)) {
      uint64_t drained;
      (void)!::read(wake_fd_, &drained, sizeof(drained));
    }
    if (rc > 0 && (fds[0].revents & POLLIN)) {
      // A socket appears a moment before it listens; give it that moment
      // (and let a remove + create pair of a restarting plugin arrive).
      ::poll(nullptr, 0, 50);
      ReadEvents();
    }
  }
}

void PluginWatcher::ReadEvents() {
  alignas(inotify_event) char buf[4096];
  ssize_t n;
  while ((n = ::read(inotify_fd_, buf, sizeof(buf))) > 0) {
    for (ssize_t off = 0; off + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
      // ev->name is NUL-padded to ev->len; spelled as Sockets() spells it.
      if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && ev->len > 0) {
        created_.insert((fs::path(dir_) / ev->name).string());
      }
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
}

std::map<std::string, PluginWatcher::FileId> PluginWatcher::Sockets() const {
  std::map<std::string, FileId> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir_, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      out[it->path().string()] = {.inode = st.st_ino,
                                  .ctime_ns = int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec};
    }
  }
  return out;
}

void PluginWatcher::Rescan() {
  // Creations queued before this scan are read first, so a rescan that a
  // retry or the period woke (not an event) leaves fewer create events of
  // sockets it registers to be read after it.
  ReadEvents();
  const std::map<std::string, FileId> sockets = Sockets();
  // Gone or replaced sockets: deregister.
  std::map<std::string, Plugin> current;
  {
    absl::MutexLock lock(&mu_);
    current = plugins_;
  }
  for (const auto& [socket, plugin] : current) {
    auto it = sockets.find(socket);
    const bool recreated = created_.count(socket) > 0 && it != sockets.end() && it->second != plugin.file;
    if (it != sockets.end() && it->second.inode == plugin.file.inode && !recreated) continue;
    spdlog::info("plugin {} at {} {}; deregistering", plugin.name, socket,
                 it == sockets.end() ? "went away" : "was replaced");
    handler_.DeregisterPlugin(plugin.name);
    absl::MutexLock lock(&mu_);
    plugins_.erase(socket);
  }
  // A socket created anew is tried at once, by the rule a registered one is
  // told replaced by: a new inode, or a create event for its name on a file
  // other than the one tried. The create event of the very file a scan
  // already tried (the scan saw it before the event was read) keeps its
  // backoff.
  for (auto it = retries_.begin(); it != retries_.end();) {
    auto s = sockets.find(it->first);
    const bool fresh = s == sockets.end() || s->second.inode != it->second.file.inode ||
                       (created_.count(it->first) > 0 && s->second != it->second.file);
    if (!fresh) {
      ++it;
      continue;
    }
    retry_backoff_.Forget(it->first);
    it = retries_.erase(it);
  }
  created_.clear();
  // New sockets: register.
  const absl::Time now = clock_.Now();
  for (const auto& [socket, file] : sockets) {
    {
      absl::MutexLock lock(&mu_);
      if (plugins_.count(socket)) continue;
    }
    auto retry = retries_.find(socket);
    if (retry != retries_.end() && retry->second.next > now) continue;
    auto name = Register(socket);
    if (name.ok()) {
      retries_.erase(socket);
      retry_backoff_.Forget(socket);
      absl::MutexLock lock(&mu_);
      plugins_[socket] = Plugin{.name = *name, .file = file};
      continue;
    }
    Retry& r = retries_[socket];
    r.file = file;
    const absl::Duration delay = retry_backoff_.When(socket);
    r.next = clock_.Now() + delay;
    spdlog::warn("registering the plugin at {} failed ({}); retrying in {}", socket,
                 std::string(name.status().message()), absl::FormatDuration(delay));
  }
}

absl::StatusOr<std::string> PluginWatcher::Register(const std::string& socket) {
  csi::ConnectOptions connect;
  connect.timeout = std::min(options_.call_timeout, absl::Seconds(2));  // a stale socket: retry later
  BERTH_ASSIGN_OR_RETURN(auto channel, csi::ConnectUnix(socket, connect));
  auto stub = ::pluginregistration::Registration::NewStub(channel);
  ::pluginregistration::PluginInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
    grpc::Status st = stub->GetInfo(&ctx, ::pluginregistration::InfoRequest(), &info);
    if (!st.ok()) return absl::UnavailableError(StrCat("GetInfo: ", st.error_message()));
  }
  absl::Status verdict;
  if (info.type() != "CSIPlugin") {
    verdict = absl::InvalidArgumentError(StrCat("plugin type \"", info.type(), "\" is not supported (only CSIPlugin)"));
  } else if (info.name().empty()) {
    verdict = absl::InvalidArgumentError("the plugin has no name");
  } else {
    std::vector<std::string> versions(info.supported_versions().begin(), info.supported_versions().end());
    verdict = handler_.RegisterPlugin(info.name(), info.endpoint().empty() ? socket : info.endpoint(), versions);
  }
  if (options_.notify) {
    ::pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(verdict.ok());
    if (!verdict.ok()) status.set_error(std::string(verdict.message()));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
    ::pluginregistration::RegistrationStatusResponse ignored;
    grpc::Status st = stub->NotifyRegistrationStatus(&ctx, status, &ignored);
    if (!st.ok()) spdlog::warn("telling plugin {} its registration status: {}", info.name(), st.error_message());
  }
  // A refused plugin is retried with backoff too: it may be fixed in place.
  if (!verdict.ok()) return verdict;
  spdlog::info("registered plugin {} (endpoint {})", info.name(), info.endpoint().empty() ? socket : info.endpoint());
  return info.name();
}

}  // namespace berth::node
