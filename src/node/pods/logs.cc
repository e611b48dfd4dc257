#include "node/pods/logs.h"

#include <sys/stat.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "api/errors.h"
#include "client/object.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"
#include "node/pods/pod_config.h"
#include "node/pods/pod_workers.h"
#include "spdlog/spdlog.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Turns CRI lines into output lines, joining partial pieces.
class LineAssembler {
 public:
  explicit LineAssembler(const LogOptions& options) : options_(options) {}
  // Feeds one CRI line; returns a finished output line, if any.
  std::optional<std::string> Feed(std::string_view raw) {
    auto line = ParseCriLogLine(raw);
    if (!line) return std::nullopt;
    if (pending_.empty()) first_time_ = std::string(raw.substr(0, raw.find(' '))), first_ = line->time;
    pending_.append(line->content);
    if (line->partial) return std::nullopt;
    std::string out = std::move(pending_);
    pending_.clear();
    if (first_ < options_.since) return std::nullopt;
    out.push_back('\n');
    if (options_.timestamps) out = first_time_ + " " + out;
    return out;
  }

 private:
  const LogOptions& options_;
  std::string pending_;
  std::string first_time_;
  absl::Time first_;
};

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId&) const = default;
};

std::optional<FileId> IdOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

bool QueryTrue(const http::HttpRequest& r, const char* key) {
  auto it = r.query.find(key);
  return it != r.query.end() && (it->second == "true" || it->second == "1");
}

const json* StatusOf(const json& pod, const std::string& container, bool* init) {
  for (const char* field : {"containerStatuses", "initContainerStatuses"}) {
    const json& list = client::Field(client::Field(pod, "status"), field);
    if (!list.is_array()) continue;
    for (const auto& s : list) {
      if (s.value("name", "") == container) {
        *init = std::string_view(field) == "initContainerStatuses";
        return &s;
      }
    }
  }
  return nullptr;
}

}  // namespace

std::optional<CriLogLine> ParseCriLogLine(std::string_view line) {
  const size_t a = line.find(' ');
  if (a == std::string_view::npos) return std::nullopt;
  const size_t b = line.find(' ', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  const size_t c = line.find(' ', b + 1);
  CriLogLine out;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(line.substr(0, a)), &out.time, &err)) return std::nullopt;
  out.stream = line.substr(a + 1, b - a - 1);
  if (out.stream != "stdout" && out.stream != "stderr") return std::nullopt;
  const std::string_view tags = line.substr(b + 1, (c == std::string_view::npos ? line.size() : c) - b - 1);
  for (size_t i = 0; i < tags.size();) {
    const size_t end = std::min(tags.find(':', i), tags.size());
    if (tags.substr(i, end - i) == "P") out.partial = true;
    i = end + 1;
  }
  out.content = c == std::string_view::npos ? std::string_view() : line.substr(c + 1);
  return out;
}

namespace {

// Reads a CRI log file incrementally: what is there at first (its last
// tailLines), then whatever is appended, across rotations and truncation.
class LogReader {
 public:
  LogReader(std::string path, const LogOptions& options)
      : path_(std::move(path)), options_(options), lines_(options_) {}
  LogReader(const LogReader&) = delete;  // lines_ refers to options_
  LogReader& operator=(const LogReader&) = delete;

  absl::Status Open() {
    in_.open(path_, std::ios::binary);
    if (!in_) return absl::NotFoundError(StrCat("log file ", path_, " not found"));
    id_ = IdOf(path_);
    return absl::OkStatus();
  }

  // The complete lines there now (the last tailLines of them). False when
  // the output is done (the reader went away or limitBytes was reached).
  bool ReadInitial(const std::function<bool(std::string_view)>& write) {
    std::deque<std::string> tail;
    std::string raw;
    while (std::getline(in_, raw)) {
      if (in_.eof()) break;  // an unfinished last line: read again when following
      offset_ = in_.tellg();
      auto out = lines_.Feed(raw);
      if (!out) continue;
      tail.push_back(std::move(*out));
      if (options_.tail_lines >= 0 && static_cast<int64_t>(tail.size()) > options_.tail_lines) tail.pop_front();
    }
    for (auto& s : tail) {
      if (!Emit(std::move(s), write)) return false;
    }
    return true;
  }

  enum class Step { kGot, kNothingNew, kDone };
  // What was appended since; a rotated or truncated file is started over
  // (kGot: look again at once).
  Step ReadMore(const std::function<bool(std::string_view)>& write) {
    in_.clear();
    in_.seekg(offset_);
    bool got = false;
    std::string chunk;
    while (std::getline(in_, chunk)) {
      if (in_.eof()) break;  // no newline yet: read again
      offset_ = in_.tellg();
      got = true;
      if (auto out = lines_.Feed(chunk); out && !Emit(std::move(*out), write)) return Step::kDone;
    }
    if (got) return Step::kGot;
    std::optional<FileId> now = IdOf(path_);
    struct stat st {};
    const bool truncated = ::stat(path_.c_str(), &st) == 0 && st.st_size < offset_;
    if ((now && id_ && !(*now == *id_)) || truncated) {
      in_.close();
      in_.open(path_, std::ios::binary);
      id_ = now;
      offset_ = 0;
      return Step::kGot;
    }
    return Step::kNothingNew;
  }

 private:
  bool Emit(std::string s, const std::function<bool(std::string_view)>& write) {
    if (options_.limit_bytes >= 0) {
      if (written_ >= options_.limit_bytes) return false;
      if (written_ + static_cast<int64_t>(s.size()) > options_.limit_bytes) s.resize(options_.limit_bytes - written_);
    }
    written_ += static_cast<int64_t>(s.size());
    return write(s) && (options_.limit_bytes < 0 || written_ < options_.limit_bytes);
  }

  const std::string path_;
  const LogOptions options_;
  LineAssembler lines_;
  std::ifstream in_;
  std::optional<FileId> id_;
  std::streamoff offset_ = 0;
  int64_t written_ = 0;
};

// Every followed log of the process (kubectl logs -f), on one thread: each
// is a detached HTTP stream the thread appends to every 100 ms while its
// container instance runs. A follower whose stream ends (the client went
// away, the server is stopping) is dropped at once from the stream's
// wakeup, which waits for a round in progress: once the HTTP server has
// shut down, no follower touches the registry again.
class LogFollowers {
 public:
  struct Follower {
    std::unique_ptr<LogReader> reader;
    std::shared_ptr<http::Stream> stream;
    std::function<bool()> still_running;  // the registry's view, asked every second
    absl::Time next_check = absl::InfinitePast();
  };

  static LogFollowers& Get() {
    static LogFollowers* followers = new LogFollowers();  // lives as long as the process; its thread too
    return *followers;
  }

  void Add(Follower f) ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<http::Stream> stream = f.stream;
    const uint64_t id = [&] {
      absl::MutexLock lock(&mu_);
      if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
      followers_.emplace(++next_id_, std::move(f));
      return next_id_;
    }();
    // Runs at once if the stream already ended.
    stream->SetWakeup([this, id, weak = std::weak_ptr<http::Stream>(stream)] {
      auto s = weak.lock();
      if (s == nullptr || s->Ended()) Remove(id);
    });
  }

 private:
  LogFollowers() = default;

  void Remove(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_) {
    Follower gone;
    {
      absl::MutexLock lock(&mu_);
      auto it = followers_.find(id);
      if (it == followers_.end()) return;
      gone = std::move(it->second);
      followers_.erase(it);
    }
    // `gone` (its stream's wakeup among it) is destroyed outside the lock.
  }

  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    for (;;) {
      std::vector<Follower> done;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::map<uint64_t, Follower>* f) { return !f->empty(); }, &followers_));
        for (auto it = followers_.begin(); it != followers_.end();) {
          if (Step(it->second)) {
            ++it;
          } else {
            done.push_back(std::move(it->second));
            it = followers_.erase(it);
          }
        }
      }
      for (auto& f : done) f.stream->Finish();
      done.clear();
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  // One round for one follower; false when it is done.
  static bool Step(Follower& f) {
    if (f.stream->Ended()) return false;
    if (f.stream->Backlogged()) return true;  // the client reads slowly: wait for it
    auto write = [&](std::string_view s) { return f.stream->Write(std::string(s)); };
    for (;;) {
      switch (f.reader->ReadMore(write)) {
        case LogReader::Step::kDone:
          return false;
        case LogReader::Step::kGot:
          if (f.stream->Backlogged()) return true;
          continue;
        case LogReader::Step::kNothingNew:
          break;
      }
      break;
    }
    if (absl::Now() >= f.next_check) {
      f.next_check = absl::Now() + absl::Seconds(1);
      if (!f.still_running()) return false;
    }
    return true;
  }

  absl::Mutex mu_;
  std::map<uint64_t, Follower> followers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::Status CopyLog(const std::string& path, const LogOptions& options,
                     const std::function<bool(std::string_view)>& write, const std::function<bool()>& keep_following,
                     absl::Duration poll) {
  LogReader reader(path, options);
  BERTH_RETURN_IF_ERROR(reader.Open());
  if (!reader.ReadInitial(write) || !options.follow) return absl::OkStatus();
  for (;;) {
    switch (reader.ReadMore(write)) {
      case LogReader::Step::kDone:
        return absl::OkStatus();
      case LogReader::Step::kGot:
        continue;
      case LogReader::Step::kNothingNew:
        break;
    }
    if (!keep_following()) return absl::OkStatus();
    absl::SleepFor(poll);
  }
}

absl::StatusOr<std::string> RequestedContainer(const json& pod, const std::string& name, std::string container) {
  std::vector<std::string> names, init_names;
  for (const char* field : {"containers", "initContainers"}) {
    const json& list = client::Field(client::Field(pod, "spec"), field);
    for (const auto& c : list.is_array() ? list : json::array()) {
      (std::string_view(field) == "containers" ? names : init_names).push_back(c.value("name", ""));
    }
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
    return "[" + s + "]";
  };
  if (container.empty()) {
    if (names.size() != 1) {
      std::string msg = StrCat("a container name must be specified for pod ", name, ", choose one of: ", join(names));
      if (!init_names.empty()) msg += StrCat(" or one of the init containers: ", join(init_names));
      return api::BadRequest(msg);
    }
    container = names.front();
  }
  if (std::find(names.begin(), names.end(), container) == names.end() &&
      std::find(init_names.begin(), init_names.end(), container) == init_names.end()) {
    return api::BadRequest(StrCat("container ", container, " is not valid for pod ", name));
  }
  return container;
}

absl::Status ServePodLog(apiserver::Api& registry, const std::string& log_root, const std::string& ns,
                         const std::string& name, const http::HttpRequest& request, http::ResponseWriter& out) {
  BERTH_ASSIGN_OR_RETURN(json pod, registry.Get(client::K("pods"), ns, name));
  std::string container;
  if (auto it = request.query.find("container"); it != request.query.end()) container = it->second;
  BERTH_ASSIGN_OR_RETURN(container, RequestedContainer(pod, name, container));
  bool init = false;
  const json* status = StatusOf(pod, container, &init);
  const bool previous = QueryTrue(request, "previous");
  const json state = status != nullptr ? status->value("state", json::object()) : json::object();
  const json last = status != nullptr ? status->value("lastState", json::object()) : json::object();
  int64_t index = status != nullptr ? status->value("restartCount", 0) : 0;
  // kubelet's validateContainerLogStatus, by instance: the newest instance
  // writes <restartCount>.log; a waiting container's lastState is that
  // same newest (exited) instance.
  const bool newer = state.contains("running") || state.contains("terminated");
  if (previous) {
    if (!last.contains("terminated")) {
      return absl::InvalidArgumentError(
          StrCat("previous terminated container \"", container, "\" in pod \"", name, "\" not found"));
    }
    if (newer) --index;
  } else if (!newer && !last.contains("terminated")) {
    std::string reason = "ContainerCreating";
    if (state.contains("waiting")) reason = state["waiting"].value("reason", reason);
    if (reason == "ErrImagePull") reason = "image can't be pulled";
    if (reason == "ImagePullBackOff") reason = "trying and failing to pull image";
    return absl::InvalidArgumentError(
        StrCat("container \"", container, "\" in pod \"", name, "\" is waiting to start: ", reason));
  }
  LogOptions options;
  options.timestamps = QueryTrue(request, "timestamps");
  options.follow = QueryTrue(request, "follow") && !previous;
  auto number = [&](const char* key, int64_t* v) -> absl::Status {
    auto it = request.query.find(key);
    if (it == request.query.end()) return absl::OkStatus();
    if (!absl::SimpleAtoi(it->second, v) || *v < 0)
      return absl::InvalidArgumentError(StrCat(key, ": want a non-negative integer"));
    return absl::OkStatus();
  };
  BERTH_RETURN_IF_ERROR(number("tailLines", &options.tail_lines));
  BERTH_RETURN_IF_ERROR(number("limitBytes", &options.limit_bytes));
  int64_t since_seconds = -1;
  BERTH_RETURN_IF_ERROR(number("sinceSeconds", &since_seconds));
  if (since_seconds >= 0) options.since = absl::Now() - absl::Seconds(since_seconds);
  if (auto it = request.query.find("sinceTime"); it != request.query.end()) {
    std::string err;
    if (!absl::ParseTime(absl::RFC3339_full, it->second, &options.since, &err)) {
      return absl::InvalidArgumentError("sinceTime: want an RFC 3339 time");
    }
  }
  const std::string path = StrCat(PodLogDirectory(log_root, pod), "/", container, "/", index, ".log");
  if (!fs::exists(path)) {
    return absl::NotFoundError(
        StrCat("the log of container \"", container, "\" in pod \"", name, "\" is gone (", path, ")"));
  }
  auto reader = std::make_unique<LogReader>(path, options);
  if (absl::Status st = reader->Open(); !st.ok()) return st;
  if (!out.StartStream(200, "text/plain")) return absl::OkStatus();
  if (!reader->ReadInitial([&](std::string_view s) { return out.WriteChunk(std::string(s)); }) || !options.follow) {
    return absl::OkStatus();
  }
  // Follow while this instance of the container runs (checked every
  // second), on the followers' thread: this handler's thread is free.
  auto still_running = [&registry, ns, name, uid = client::Uid(pod), container, index] {
    auto now = registry.Get(client::K("pods"), ns, name);
    bool is_init = false;
    const json* s = now.ok() && client::Uid(*now) == uid ? StatusOf(*now, container, &is_init) : nullptr;
    return s != nullptr && s->value("restartCount", 0) == index && s->contains("state") &&
           (*s)["state"].contains("running");
  };
  std::shared_ptr<http::Stream> stream = out.Detach();
  if (stream == nullptr) return absl::OkStatus();
  LogFollowers::Get().Add(
      {.reader = std::move(reader), .stream = std::move(stream), .still_running = std::move(still_running)});
  return absl::OkStatus();
}

void PodWorkers::RotateLogs() {
  {
    absl::MutexLock lock(&mu_);
    if (clock_.Now() < next_rotation_) return;
    next_rotation_ = clock_.Now() + options_.log_rotation_period;
  }
  cri::v1::ContainerFilter filter;
  (*filter.mutable_label_selector())[kNodeLabel] = options_.node_name;
  filter.mutable_state()->set_state(cri::v1::CONTAINER_RUNNING);
  auto containers = runtime_.ListContainers(filter);
  if (!containers.ok()) return;
  std::map<std::string, std::string> log_paths;
  for (const auto& c : *containers) {
    if (auto known = log_paths_.find(c.id()); known != log_paths_.end()) {
      log_paths.insert(log_paths_.extract(known));
    } else {
      auto status = runtime_.ContainerStatus(c.id());
      if (!status.ok()) continue;
      log_paths[c.id()] = status->log_path();
    }
  }
  log_paths_ = std::move(log_paths);  // containers no longer running are forgotten
  log_paths_size_.store(log_paths_.size());
  for (const auto& c : *containers) {
    auto known = log_paths_.find(c.id());
    if (known == log_paths_.end() || known->second.empty()) continue;
    const std::string path = known->second;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec || static_cast<int64_t>(size) <= options_.log_max_bytes) continue;
    const std::string rotated = path + "." + absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::UTCTimeZone());
    fs::rename(path, rotated, ec);
    if (ec) continue;
    if (absl::Status st = runtime_.ReopenContainerLog(c.id()); !st.ok()) {
      fs::rename(rotated, path, ec);  // the runtime still writes the old file
      spdlog::warn("node {}: rotating {}: {}", options_.node_name, path, st.ToString());
      continue;
    }
    // Keep the newest log_max_files - 1 rotated files beside the live one.
    std::vector<std::string> old;
    const std::string base = fs::path(path).filename().string() + ".";
    for (const auto& e : fs::directory_iterator(fs::path(path).parent_path(), ec)) {
      if (e.path().filename().string().rfind(base, 0) == 0) old.push_back(e.path().string());
    }
    std::sort(old.begin(), old.end());
    for (size_t i = 0; i + std::max(1, options_.log_max_files - 1) < old.size(); ++i) fs::remove(old[i], ec);
  }
}

}  // namespace berth::node::pods
