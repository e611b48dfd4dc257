#include "cli/get.h"

#include <ostream>

#include "absl/strings/str_split.h"
#include "cli/printers.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {

using http::ApiClient;
using http::ApiResponse;
using nlohmann::json;

absl::StatusOr<std::vector<KindRequest>> ParseResourceArgs(const std::vector<std::string>& args) {
  if (args.empty()) {
    return absl::InvalidArgumentError(
        "you must specify the type of resource to get. Use \"berth api-resources\" for a complete list of supported "
        "resources.");
  }
  std::vector<KindRequest> out;
  if (args[0].find('/') != std::string::npos) {
    for (const auto& a : args) {
      size_t slash = a.find('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == a.size()) {
        return absl::InvalidArgumentError(
            StrCat("there is no need to specify a resource type as a separate argument when passing arguments in "
                   "resource/name form (e.g. 'berth get resource/<resource_name>' instead of 'berth get resource "
                   "resource/<resource_name>'"));
      }
      BERTH_ASSIGN_OR_RETURN(const api::KindInfo* k, ResolveKind(a.substr(0, slash)));
      auto it = std::find_if(out.begin(), out.end(), [k](const KindRequest& r) { return r.kind == k; });
      if (it == out.end()) it = out.insert(out.end(), KindRequest{k, {}});
      it->names.push_back(a.substr(slash + 1));
    }
    return out;
  }
  for (std::string_view name : Split(args[0], ',')) {
    if (name.empty()) continue;
    BERTH_ASSIGN_OR_RETURN(const api::KindInfo* k, ResolveKind(name));
    if (std::none_of(out.begin(), out.end(), [k](const KindRequest& r) { return r.kind == k; })) {
      out.push_back({k, {}});
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("you must specify the type of resource to get");
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          "there is no need to specify a resource type as a separate argument when passing arguments in "
          "resource/name form (e.g. 'berth get resource/<resource_name>' instead of 'berth get resource "
          "resource/<resource_name>'");
    }
    for (auto& r : out) r.names.push_back(args[i]);
  }
  return out;
}

namespace {

std::string SelectorQuery(const GetOptions& o) {
  std::string q;
  if (!o.label_selector.empty()) q = StrCat("labelSelector=", UrlEscape(o.label_selector));
  if (!o.field_selector.empty()) q += StrCat(q.empty() ? "" : "&", "fieldSelector=", UrlEscape(o.field_selector));
  return q;
}

// The stream after the list: each change printed as it comes.
absl::Status Watch(ApiClient& client, const GetOptions& o, const KindRequest& req, const std::string& ns,
                   const std::string& rv, PrintOptions print, std::ostream& out) {
  std::string query = StrCat("?watch=1&allowWatchBookmarks=false&resourceVersion=", rv.empty() ? "0" : rv);
  // kubectl watches one object through a name field selector.
  std::string fields = o.field_selector;
  if (req.names.size() == 1) fields = StrCat("metadata.name=", req.names[0], fields.empty() ? "" : ",", fields);
  std::string selectors;
  if (!o.label_selector.empty()) selectors = StrCat("labelSelector=", UrlEscape(o.label_selector));
  if (!fields.empty()) selectors += StrCat(selectors.empty() ? "" : "&", "fieldSelector=", UrlEscape(fields));
  if (!selectors.empty()) query += "&" + selectors;
  print.single = false;
  absl::Status stream_error;
  auto r = client.Stream(CollectionPath(*req.kind, ns) + query, "application/json", [&](const std::string& line) {
    json e = json::parse(line, nullptr, false);
    if (!e.is_object()) return true;
    const std::string type = e.value("type", "");
    if (type == "ERROR") {
      stream_error = absl::UnavailableError(e["object"].value("message", "the watch ended"));
      return false;
    }
    if (type == "BOOKMARK") return true;
    if (req.names.size() > 1) {
      const std::string name = e["object"]["metadata"].value("name", "");
      if (std::find(req.names.begin(), req.names.end(), name) == req.names.end()) return true;
    }
    // Each event prints on its own: one object (yaml: a document).
    PrintOptions one = print;
    one.single = true;
    std::string text = PrintObjects({{req.kind, {e["object"]}}}, one, absl::Now());
    if (print.format.type == OutputFormat::kYaml) text = "---\n" + text;
    out << text << std::flush;
    print.headers = false;
    return true;
  });
  if (!r.ok()) return r.status();
  if (r->code != 200) return ServerError(*r);
  return stream_error;
}

}  // namespace

absl::Status Get(ApiClient& client, const GetOptions& o, std::ostream& out, std::ostream& err) {
  BERTH_ASSIGN_OR_RETURN(OutputFormat format, OutputFormat::Parse(o.output));
  BERTH_ASSIGN_OR_RETURN(std::vector<KindRequest> requests, ParseResourceArgs(o.args));
  const bool watch = o.watch || o.watch_only;
  if (watch && requests.size() > 1) {
    return absl::InvalidArgumentError(
        StrCat("watch is only supported on individual resources and resource "
               "collections, but ",
               requests.size(), " resources were found"));
  }
  const std::string ns = NamespaceFor(client, o.target);
  const std::string query = SelectorQuery(o);
  PrintOptions print;
  print.format = std::move(format);
  print.with_namespace = o.target.all_namespaces;
  print.with_kind = requests.size() > 1;
  print.single = requests.size() == 1 && requests[0].names.size() == 1 && !watch;
  print.headers = !o.no_headers;
  const bool human = !print.format.structured() && print.format.type != OutputFormat::kJsonPath;

  // One kind listed as a table: each page of 500 is printed as it arrives,
  // so the first rows of 100,000 claims show in milliseconds and memory
  // stays flat. Its columns are aligned within the page (as a watch's
  // lines are); a list of one page prints as a whole list would.
  if (requests.size() == 1 && requests[0].names.empty() && o.sort_by.empty() && !o.watch_only && human) {
    const KindRequest& req = requests[0];
    const std::string kind_ns = req.kind->namespaced && !o.target.all_namespaces ? ns : "";
    std::string list_rv;
    size_t count = 0;
    BERTH_RETURN_IF_ERROR(
        ListPages(client, CollectionPath(*req.kind, kind_ns), query, &list_rv, [&](std::vector<json> items) {
          if (items.empty()) return absl::OkStatus();
          PrintOptions page = print;
          page.headers = print.headers && count == 0;
          count += items.size();
          out << PrintObjects({{req.kind, std::move(items)}}, page, absl::Now());
          out.flush();
          return absl::OkStatus();
        }));
    if (count == 0 && !watch) {
      err << (req.kind->namespaced && !o.target.all_namespaces ? StrCat("No resources found in ", ns, " namespace.")
                                                               : std::string("No resources found"))
          << "\n";
    }
    if (!watch) return absl::OkStatus();
    print.headers = !o.no_headers && count == 0;
    return Watch(client, o, req, kind_ns, list_rv, std::move(print), out);
  }

  std::vector<KindObjects> groups;
  absl::Status missing;
  std::string missing_text;
  std::string list_rv;
  bool any_namespaced = false, by_name = false;
  for (const auto& req : requests) {
    const std::string kind_ns = req.kind->namespaced && !o.target.all_namespaces ? ns : "";
    any_namespaced = any_namespaced || req.kind->namespaced;
    KindObjects g{req.kind, {}};
    if (req.names.empty()) {
      BERTH_ASSIGN_OR_RETURN(g.items, ListAll(client, CollectionPath(*req.kind, kind_ns), query, &list_rv));
    } else {
      by_name = true;
      if (watch) {
        // The version to watch from, read before the objects: a change in
        // between is seen twice rather than never.
        BERTH_ASSIGN_OR_RETURN(ApiResponse lr, client.Call("GET", CollectionPath(*req.kind, kind_ns) + "?limit=1"));
        if (lr.code != 200) return ServerError(lr);
        BERTH_ASSIGN_OR_RETURN(json list, ParseBody(lr));
        list_rv = list["metadata"].value("resourceVersion", "");
      }
      for (const auto& n : req.names) {
        auto got = GetObject(client, *req.kind, kind_ns, n);
        if (got.ok()) {
          g.items.push_back(std::move(*got));
        } else if (got.status().code() == absl::StatusCode::kNotFound && o.ignore_not_found) {
          continue;
        } else if (got.status().code() == absl::StatusCode::kNotFound) {
          // kubectl prints what it found, then one line per missing name.
          if (missing.ok()) missing = got.status();
          missing_text += StrCat(missing_text.empty() ? "" : "\n", got.status().message());
        } else {
          return got.status();
        }
      }
    }
    if (!o.sort_by.empty()) BERTH_RETURN_IF_ERROR(SortObjects(g.items, o.sort_by));
    groups.push_back(std::move(g));
  }
  size_t count = 0;
  for (const auto& g : groups) count += g.items.size();
  if (!o.watch_only) {
    if (count == 0 && human && missing.ok()) {
      // kubectl's note, on stderr so scripts reading stdout see nothing.
      if (!watch) {
        err << (any_namespaced && !o.target.all_namespaces ? StrCat("No resources found in ", ns, " namespace.")
                                                           : std::string("No resources found"))
            << "\n";
      }
    } else if (!(count == 0 && (by_name || watch))) {
      out << PrintObjects(groups, print, absl::Now());
    }
    out.flush();
  }
  if (!missing.ok()) return absl::Status(missing.code(), missing_text);
  if (!watch) return absl::OkStatus();
  const KindRequest& req = requests[0];
  print.headers = !o.no_headers && (o.watch_only || count == 0);
  return Watch(client, o, req, req.kind->namespaced && !o.target.all_namespaces ? ns : "", list_rv, std::move(print),
               out);
}

}  // namespace berth::cli
