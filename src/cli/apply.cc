// berth apply -f: manifests read as a stream and applied over a few
// kept-alive connections at once, printed in the file's order.
//
// Each object is created first (POST, no GET before it); an AlreadyExists
// answer (or a refusal of the create, which may only be the create's) falls
// back to kubectl's read-modify-write: GET, three-way merge patch against
// the last-applied annotation, PATCH. Objects that may be needed by those
// after them (cluster-scoped ones: namespaces, classes, CRDs) and a second
// object of the same name are applied alone, after everything before them.
// The first kApplyWindow objects are read before anything is sent, so a
// malformed input of fewer applies nothing (as before); past that, the
// objects before a malformed document are applied and the error names its
// line. A failed object does not stop the others; its error names the
// object and FILE:LINE, and the command exits non-zero.
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "api/codec.h"
#include "api/json_text.h"
#include "api/kinds.h"
#include "cli/commands.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {
// Named, not anonymous: the unity build puts this file beside commands.cc.
namespace apply_internal {

using http::ApiClient;
using http::ApiResponse;
using nlohmann::json;

constexpr char kApplyLastApplied[] = "kubectl.kubernetes.io/last-applied-configuration";
constexpr char kApplyMergePatch[] = "application/merge-patch+json";
// Objects read ahead of the one printed next.
constexpr size_t kApplyWindow = 1000;
// Connections (one thread each) applying objects at once.
constexpr size_t kApplyConnections = 8;

// One object of the input, from reading to its printed line.
struct Job {
  json object;  // with the last-applied annotation
  const api::KindInfo* kind = nullptr;
  std::string ns, name;
  std::string where;     // "claims.yaml:12"
  bool barrier = false;  // applied alone, after all before it
  // Results (under the applier's mutex once workers run).
  bool done = false;
  std::string printed;  // "persistentvolumeclaim/x created"
  absl::Status error;   // this object failed
  absl::Status fatal;   // the API cannot be reached: stop
};

// `st` with "error when VERB OBJECT (FILE:LINE)" put before its message
// (after kubectl's "Error from server (Reason): " prefix, if it has one).
absl::Status InContext(const absl::Status& st, std::string_view what) {
  const std::string msg(st.message());
  constexpr std::string_view kServer = "Error from server (";
  if (msg.starts_with(kServer)) {
    if (size_t p = msg.find("): "); p != std::string::npos) {
      return absl::Status(st.code(), StrCat(msg.substr(0, p + 3), what, ": ", msg.substr(p + 3)));
    }
  }
  return absl::Status(st.code(), StrCat(what, ": ", msg));
}

std::string What(std::string_view verb, const Job& j) {
  return StrCat("error when ", verb, " ", TypedName(*j.kind, j.name), " (", j.where, ")");
}

// The read-modify-write of an object that exists.
void Update(ApiClient& client, Job& j) {
  const std::string path = ObjectPath(*j.kind, j.ns, j.name);
  absl::StatusOr<ApiResponse> got = client.Call("GET", path);
  if (!got.ok()) {
    j.fatal = got.status();
    return;
  }
  if (got->code != 200) {
    j.error = InContext(ServerError(*got), What("reading", j));
    return;
  }
  absl::StatusOr<json> current = ParseBody(*got);
  if (!current.ok()) {
    j.error = InContext(current.status(), What("reading", j));
    return;
  }
  json original = json::object();
  std::string previous = (*current)["metadata"].value("annotations", json::object()).value(kApplyLastApplied, "");
  if (!previous.empty()) {
    original = json::parse(previous, nullptr, false);
    if (original.is_discarded()) original = json::object();
  }
  json patch = ThreeWayMergePatch(original, j.object, *current);
  if (patch.empty()) {
    j.printed = TypedName(*j.kind, j.name) + " unchanged";
    return;
  }
  absl::StatusOr<ApiResponse> r = client.Call("PATCH", path, patch.dump(), kApplyMergePatch);
  if (!r.ok()) {
    j.fatal = r.status();
  } else if (r->code == 200) {
    j.printed = TypedName(*j.kind, j.name) + " configured";
  } else {
    j.error = InContext(ServerError(*r), What("patching", j));
  }
}

// Create, else update.
void ApplyOne(ApiClient& client, Job& j) {
  absl::StatusOr<ApiResponse> r = client.Call("POST", CollectionPath(*j.kind, j.ns), api::DumpJson(j.object));
  if (!r.ok()) {
    j.fatal = r.status();
    return;
  }
  if (r->code == 201 || r->code == 200) {
    j.printed = TypedName(*j.kind, j.name) + " created";
    return;
  }
  const absl::Status refused = ServerError(*r);
  // 409 AlreadyExists: update it. A create refused as invalid may be
  // refused only as a create (the patch of an existing object can be
  // valid): look before reporting it.
  if (refused.code() == absl::StatusCode::kAlreadyExists) return Update(client, j);
  if (refused.code() == absl::StatusCode::kInvalidArgument) {
    absl::StatusOr<ApiResponse> got = client.Call("GET", ObjectPath(*j.kind, j.ns, j.name));
    if (!got.ok()) {
      j.fatal = got.status();
      return;
    }
    if (got->code == 200) return Update(client, j);
  }
  j.error = InContext(refused, What("creating", j));
}

// The status line on a terminal: "[37/5000] applying, 120/s" ("[37]" while
// the input's end is not read yet), erased before each printed object and
// redrawn after it; nothing is left at the end.
class Progress {
 public:
  Progress(std::ostream& out, bool enabled) : out_(out), enabled_(enabled), start_(absl::Now()) {}
  void Before() {
    if (shown_) out_ << "\r\033[K";
    shown_ = false;
  }
  // `done` objects printed of `total` (0: not known yet).
  void After(size_t done, size_t total) {
    if (!enabled_ || (total > 0 && done >= total)) return;
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    out_ << "[" << done;
    if (total > 0) out_ << "/" << total;
    out_ << "] applying";
    if (seconds > 0.5) out_ << ", " << static_cast<int64_t>(static_cast<double>(done) / seconds) << "/s";
    out_ << std::flush;
    shown_ = true;
  }

 private:
  std::ostream& out_;
  const bool enabled_;
  const absl::Time start_;
  bool shown_ = false;
};

// An input: a file (its name as given) or stdin ("STDIN").
struct Source {
  std::string name;
  std::string path;  // "" for stdin
};

absl::StatusOr<std::vector<Source>> Sources(const std::vector<std::string>& files) {
  std::vector<Source> out;
  for (const auto& f : files) {
    if (f == "-") {
      out.push_back({"STDIN", ""});
      continue;
    }
    std::error_code ec;
    std::vector<std::string> paths;
    if (std::filesystem::is_directory(f, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(f, ec)) {
        std::string ext = e.path().extension();
        if (e.is_regular_file() && (ext == ".yaml" || ext == ".yml" || ext == ".json")) paths.push_back(e.path());
      }
      std::sort(paths.begin(), paths.end());
    } else {
      paths.push_back(f);
    }
    for (const auto& p : paths) {
      if (!std::ifstream(p).is_open()) return absl::NotFoundError(StrCat("the path \"", p, "\" does not exist"));
      out.push_back({p, p});
    }
  }
  return out;
}

// The documents of every source in turn.
class Reader {
 public:
  explicit Reader(std::vector<Source> sources) : sources_(std::move(sources)) {}
  // The next document's objects with their source; false at the end.
  absl::StatusOr<bool> Next(std::vector<json>& objects, std::string& where) {
    while (true) {
      if (!reader_) {
        if (next_ == sources_.size()) return false;
        const Source& s = sources_[next_++];
        name_ = s.name;
        if (s.path.empty()) {
          reader_ = std::make_unique<api::ManifestReader>(std::cin);
        } else {
          file_ = std::make_unique<std::ifstream>(s.path);
          if (!file_->is_open()) return absl::NotFoundError(StrCat("the path \"", s.path, "\" does not exist"));
          reader_ = std::make_unique<api::ManifestReader>(*file_);
        }
      }
      auto doc = reader_->Next();
      if (!doc.ok()) return absl::InvalidArgumentError(StrCat("error parsing ", name_, ": ", doc.status().message()));
      if (!doc->has_value()) {
        reader_.reset();
        file_.reset();
        continue;
      }
      objects = std::move((*doc)->objects);
      where = StrCat(name_, ":", (*doc)->line);
      return true;
    }
  }

 private:
  std::vector<Source> sources_;
  size_t next_ = 0;
  std::string name_;
  std::unique_ptr<std::ifstream> file_;
  std::unique_ptr<api::ManifestReader> reader_;
};

}  // namespace apply_internal

absl::Status Apply(http::ApiClient& client, const std::vector<std::string>& files, const Target& target,
                   std::ostream& out, bool progress) {
  using apply_internal::ApplyOne, apply_internal::InContext, apply_internal::Job, apply_internal::kApplyConnections,
      apply_internal::kApplyLastApplied, apply_internal::kApplyWindow, apply_internal::Progress, apply_internal::Reader,
      apply_internal::Source;
  using http::ApiClient;
  using nlohmann::json;
  if (files.empty()) return absl::InvalidArgumentError("must specify -f FILE|DIR|-");
  BERTH_ASSIGN_OR_RETURN(std::vector<Source> sources, apply_internal::Sources(files));
  Reader reader(std::move(sources));

  absl::Mutex mu;
  std::deque<std::unique_ptr<Job>> jobs;  // read and not printed yet
  size_t base = 0;                        // the index of jobs.front()
  size_t next = 0;                        // the next job to hand out
  size_t in_flight = 0;
  bool barrier_running = false, input_done = false, stop = false;
  std::set<std::string> segment;  // objects since the last barrier
  absl::Status read_error;

  // Reads one document into `jobs` (locking `mu` to add them when workers
  // run); client-side errors become failed jobs.
  auto read_one = [&](bool locked) {
    std::vector<json> objects;
    std::string where;
    absl::StatusOr<bool> more = reader.Next(objects, where);
    std::vector<std::unique_ptr<Job>> read;
    for (json& m : objects) {
      auto j = std::make_unique<Job>();
      j->where = where;
      const std::string api_version = m.value("apiVersion", ""), kind_name = m.value("kind", "");
      if (!m.contains("metadata") || !m["metadata"].is_object()) m["metadata"] = json::object();
      json& md = m["metadata"];
      j->name = md.value("name", "");
      j->kind = api::FindKind(api_version, kind_name);
      auto fail = [&](absl::Status st) {
        const std::string object = j->kind != nullptr && !j->name.empty() ? TypedName(*j->kind, j->name)
                                   : j->name.empty()                      ? std::string("an object")
                                                                          : StrCat("\"", j->name, "\"");
        j->error = InContext(st, StrCat("error when applying ", object, " (", where, ")"));
        j->done = true;
      };
      if (j->kind == nullptr) {
        fail(absl::NotFoundError(StrCat("no matches for kind \"", kind_name, "\" in version \"", api_version, "\"")));
      } else if (j->kind->namespaced && !target.namespace_.empty() && !md.value("namespace", "").empty() &&
                 md.value("namespace", "") != target.namespace_) {
        const std::string ns = md.value("namespace", "");
        fail(absl::InvalidArgumentError(StrCat("the namespace from the provided object \"", ns,
                                               "\" does not match the namespace \"", target.namespace_,
                                               "\". You must pass '--namespace=", ns, "' to perform this operation.")));
      } else if (j->name.empty()) {
        fail(absl::InvalidArgumentError("apply needs metadata.name in every object"));
      } else {
        if (j->kind->namespaced) {
          j->ns = md.value("namespace", "");
          if (j->ns.empty()) j->ns = NamespaceFor(client, target);
        }
        json applied = m;
        if (applied["metadata"].contains("annotations") && applied["metadata"]["annotations"].is_object()) {
          applied["metadata"]["annotations"].erase(kApplyLastApplied);
          if (applied["metadata"]["annotations"].empty()) applied["metadata"].erase("annotations");
        }
        m["metadata"]["annotations"][kApplyLastApplied] = api::DumpJson(applied);
        j->object = std::move(m);
        const std::string key = StrCat(j->kind->resource, ".", j->kind->group, "/", j->ns, "/", j->name);
        j->barrier = !j->kind->namespaced || segment.count(key) > 0;
        if (j->barrier) segment.clear();
        segment.insert(key);
      }
      read.push_back(std::move(j));
    }
    std::optional<absl::MutexLock> lock;
    if (locked) lock.emplace(&mu);
    for (auto& j : read) jobs.push_back(std::move(j));
    if (!more.ok()) read_error = more.status();
    if (!more.ok() || !*more) input_done = true;
  };

  // Read ahead first: a malformed input of fewer objects applies nothing.
  while (!input_done && jobs.size() < kApplyWindow) read_one(false);
  if (!read_error.ok() && input_done && jobs.size() < kApplyWindow) return read_error;

  auto worker = [&](ApiClient* c) {
    while (true) {
      Job* j = nullptr;
      {
        absl::MutexLock lock(&mu);
        auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
          if (stop || (input_done && next == base + jobs.size())) return true;
          if (next == base + jobs.size()) return false;
          const Job& n = *jobs[next - base];
          return n.done || (!barrier_running && (!n.barrier || in_flight == 0));
        };
        mu.Await(absl::Condition(&ready));
        if (stop || next == base + jobs.size()) return;
        j = jobs[next++ - base].get();
        if (j->done) continue;  // failed before it was sent
        ++in_flight;
        if (j->barrier) barrier_running = true;
      }
      ApplyOne(*c, *j);
      absl::MutexLock lock(&mu);
      j->done = true;
      --in_flight;
      if (j->barrier) barrier_running = false;
      if (!j->fatal.ok()) stop = true;
    }
  };
  std::vector<std::unique_ptr<ApiClient>> clones;
  std::vector<std::thread> workers;
  {
    const size_t n = input_done ? std::min(kApplyConnections, jobs.size()) : kApplyConnections;
    for (size_t i = 0; i < n; ++i) {
      ApiClient* c = &client;
      if (i > 0) c = clones.emplace_back(client.Clone()).get();
      workers.emplace_back(worker, c);
    }
  }

  // Print in the input's order as objects are done; read as room is made.
  Progress status(out, progress);
  std::vector<absl::Status> errors;
  absl::Status fatal;
  size_t printed = 0;
  while (true) {
    std::vector<std::unique_ptr<Job>> finished;
    bool read = false, end = false;
    size_t total = 0;
    {
      absl::MutexLock lock(&mu);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return (!jobs.empty() && jobs.front()->done) || (!input_done && !stop && jobs.size() < kApplyWindow) ||
               (input_done && jobs.empty()) || (stop && in_flight == 0);
      };
      mu.Await(absl::Condition(&ready));
      while (!jobs.empty() && jobs.front()->done) {
        finished.push_back(std::move(jobs.front()));
        jobs.pop_front();
        ++base;
        if (next < base) next = base;
      }
      read = !input_done && !stop && jobs.size() < kApplyWindow;
      end = (input_done && jobs.empty()) || (stop && in_flight == 0 && finished.empty());
      if (input_done) total = base + jobs.size();
    }
    for (const auto& j : finished) {
      if (!j->fatal.ok()) {
        if (fatal.ok()) fatal = j->fatal;
        continue;
      }
      status.Before();
      if (!j->printed.empty()) out << j->printed << "\n";
      if (!j->error.ok()) errors.push_back(j->error);
      status.After(++printed, total);
    }
    if (end) break;
    if (read) read_one(true);
  }
  {
    absl::MutexLock lock(&mu);
    stop = true;
  }
  for (auto& w : workers) w.join();
  status.Before();
  if (!fatal.ok()) return fatal;
  if (!read_error.ok()) errors.push_back(read_error);
  if (errors.empty()) return absl::OkStatus();
  // The first failure's code, every failure's line (FormatError adds the
  // prefixes).
  std::string text;
  for (const auto& e : errors) text += StrCat(text.empty() ? "" : "\n", e.message());
  return absl::Status(errors.front().code(), text);
}

}  // namespace berth::cli
