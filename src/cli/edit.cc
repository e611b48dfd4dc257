// berth patch and berth edit.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <ostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "api/codec.h"
#include "cli/commands.h"
#include "cli/get.h"
#include "cli/printers.h"
#include "cli/rest.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {
namespace {

using http::ApiClient;
using http::ApiResponse;
using nlohmann::json;

// One object named by "KIND NAME" or "KIND/NAME".
absl::StatusOr<std::pair<const api::KindInfo*, std::string>> OneObject(const std::vector<std::string>& args) {
  BERTH_ASSIGN_OR_RETURN(std::vector<KindRequest> requests, ParseResourceArgs(args));
  if (requests.size() != 1 || requests[0].names.size() != 1) {
    return absl::InvalidArgumentError("one object is needed: KIND NAME or KIND/NAME");
  }
  return std::make_pair(requests[0].kind, requests[0].names[0]);
}

// A patch or an edited object: JSON, else YAML.
absl::StatusOr<json> ParseDocument(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_discarded()) return j;
  auto docs = api::DecodeManifests(text);
  if (!docs.ok())
    return absl::InvalidArgumentError(StrCat("unable to parse \"", text, "\": ", docs.status().message()));
  if (docs->size() != 1) return absl::InvalidArgumentError("expected one document");
  return std::move(docs->front());
}

constexpr char kEditHeader[] =
    "# Please edit the object below. Lines beginning with a '#' will be ignored,\n"
    "# and an empty file will abort the edit. If an error occurs while saving this file will be\n"
    "# reopened with the relevant failures.\n"
    "#\n";

// The file's text without its comment lines.
std::string WithoutComments(const std::string& text) {
  std::string out;
  for (std::string_view line : Split(text, '\n')) {
    if (TrimSpace(line).starts_with("#")) continue;
    out += StrCat(line, "\n");
  }
  // Trailing blank lines are not a change (the text is written back with
  // each reopening).
  while (out.size() >= 2 && out[out.size() - 1] == '\n' && out[out.size() - 2] == '\n') out.pop_back();
  return out;
}

// `editor path` through the shell (the editor may carry arguments, as
// $EDITOR often does: "code --wait").
absl::Status RunEditor(const std::string& editor, const std::string& path) {
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", StrCat(editor, " \"$1\"").c_str(), "sh", path.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(StrCat("there was a problem with the editor \"", editor, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Patch(ApiClient& client, const std::vector<std::string>& args, const std::string& patch_text,
                   const std::string& type, const Target& target, const std::string& output, std::ostream& out) {
  BERTH_ASSIGN_OR_RETURN(auto object, OneObject(args));
  const auto& [kind, name] = object;
  std::string content_type;
  if (type == "strategic") {
    content_type = "application/strategic-merge-patch+json";
  } else if (type == "merge") {
    content_type = "application/merge-patch+json";
  } else if (type == "json") {
    content_type = "application/json-patch+json";
  } else {
    return absl::InvalidArgumentError(StrCat("--type must be one of [json merge strategic], not \"", type, "\""));
  }
  BERTH_ASSIGN_OR_RETURN(OutputFormat format, OutputFormat::Parse(output));
  BERTH_ASSIGN_OR_RETURN(json patch, ParseDocument(patch_text));
  if (type == "json" && !patch.is_array()) return absl::InvalidArgumentError("a JSON patch is a list of operations");
  if (type != "json" && !patch.is_object()) return absl::InvalidArgumentError("a merge patch is a JSON object");
  const std::string ns = kind->namespaced ? NamespaceFor(client, target) : "";
  BERTH_ASSIGN_OR_RETURN(json before, GetObject(client, *kind, ns, name));
  BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("PATCH", ObjectPath(*kind, ns, name), patch.dump(), content_type));
  if (r.code != 200) return ServerError(r);
  BERTH_ASSIGN_OR_RETURN(json after, ParseBody(r));
  if (!output.empty()) {
    PrintOptions print;
    print.format = std::move(format);
    print.single = true;
    out << PrintObjects({{kind, {after}}}, print, absl::Now());
    return absl::OkStatus();
  }
  const bool changed =
      before["metadata"].value("resourceVersion", "") != after["metadata"].value("resourceVersion", "");
  out << TypedName(*kind, name) << (changed ? " patched" : " patched (no change)") << "\n";
  return absl::OkStatus();
}

absl::Status Edit(ApiClient& client, const std::vector<std::string>& args, const Target& target,
                  const std::string& editor, std::ostream& out, std::ostream& err) {
  BERTH_ASSIGN_OR_RETURN(auto object, OneObject(args));
  const auto& [kind, name] = object;
  const std::string ns = kind->namespaced ? NamespaceFor(client, target) : "";
  BERTH_ASSIGN_OR_RETURN(json current, GetObject(client, *kind, ns, name));

  const char* tmp = std::getenv("TMPDIR");
  std::string path = StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/berth-edit-XXXXXX.yaml");
  // mkstemps: a new file, 0600, that no one else can have prepared.
  int fd = ::mkstemps(path.data(), 5);
  if (fd < 0) return absl::InternalError(StrCat("cannot create a temporary file: ", std::strerror(errno)));
  ::close(fd);
  const std::string original = api::EncodeYaml(current);
  std::string written = StrCat(kEditHeader, original);
  std::string last_submitted = WithoutComments(original);
  bool after_error = false;
  auto keep_copy = [&](const std::string& why) {
    return absl::AbortedError(StrCat(why, "\nA copy of your changes has been stored to \"", path, "\""));
  };
  while (true) {
    BERTH_RETURN_IF_ERROR(WriteFileAtomic(path, written, 0600));
    if (absl::Status st = RunEditor(editor, path); !st.ok()) return keep_copy(std::string(st.message()));
    BERTH_ASSIGN_OR_RETURN(std::string edited, ReadFile(path));
    const std::string body = WithoutComments(edited);
    if (TrimSpace(body).empty()) {
      ::unlink(path.c_str());
      out << "Edit cancelled, no changes made.\n";
      return absl::OkStatus();
    }
    if (body == last_submitted) {
      if (!after_error) {
        ::unlink(path.c_str());
        out << "Edit cancelled, no changes made.\n";
        return absl::OkStatus();
      }
      return keep_copy("Edit cancelled, no valid changes were saved.");
    }
    last_submitted = body;
    absl::Status problem;
    auto parsed = ParseDocument(body);
    if (!parsed.ok()) {
      problem = parsed.status();
    } else if (!parsed->is_object() || parsed->value("apiVersion", "") != current.value("apiVersion", "") ||
               parsed->value("kind", "") != current.value("kind", "") ||
               parsed->value("metadata", json::object()).value("name", "") != name) {
      problem = absl::InvalidArgumentError("At least one of apiVersion, kind and name was changed");
    } else {
      json patch = ThreeWayMergePatch(current, *parsed, current);
      if (patch.empty()) {
        ::unlink(path.c_str());
        out << "Edit cancelled, no changes made.\n";
        return absl::OkStatus();
      }
      // Guarded by the version edited: a change made meanwhile by someone
      // else is a conflict, not silently overwritten.
      patch["metadata"]["resourceVersion"] = current["metadata"].value("resourceVersion", "");
      BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("PATCH", ObjectPath(*kind, ns, name), patch.dump(),
                                                        "application/merge-patch+json"));
      if (r.code == 200) {
        ::unlink(path.c_str());
        out << TypedName(*kind, name) << " edited\n";
        return absl::OkStatus();
      }
      problem = ServerError(r);
    }
    // Reopen with the failure on top, as kubectl does.
    err << FormatError(problem);
    after_error = true;
    written = StrCat(kEditHeader, "# ", kind->resource, " \"", name, "\" was not valid:\n");
    const std::string message(problem.message());
    for (std::string_view line : Split(message, '\n')) written += StrCat("# * ", line, "\n");
    written += "#\n" + body;
  }
}

}  // namespace berth::cli
