#include "cli/printers.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/codec.h"
#include "api/quantity.h"
#include "api/table.h"
#include "cli/rest.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {

using nlohmann::json;

absl::StatusOr<std::vector<CustomColumn>> ParseCustomColumns(std::string_view spec) {
  std::vector<CustomColumn> out;
  if (spec.empty()) return absl::InvalidArgumentError("custom-columns format specified but no custom columns given");
  for (std::string_view part : Split(spec, ',')) {
    size_t colon = part.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == part.size()) {
      return absl::InvalidArgumentError(
          StrCat("unexpected custom-columns spec: ", part, ", expected <header>:<json-path-expr>"));
    }
    CustomColumn c{std::string(part.substr(0, colon)), std::string(part.substr(colon + 1))};
    BERTH_RETURN_IF_ERROR(JsonPathSelect(json::object(), c.path).status());
    out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<OutputFormat> OutputFormat::Parse(std::string_view text) {
  OutputFormat f;
  auto unquote = [](std::string_view s) {
    if (s.size() >= 2 && (s.front() == '\'' || s.front() == '"') && s.back() == s.front())
      s = s.substr(1, s.size() - 2);
    return s;
  };
  if (text.empty()) return f;
  if (text == "wide") {
    f.type = kWide;
  } else if (text == "yaml") {
    f.type = kYaml;
  } else if (text == "json") {
    f.type = kJson;
  } else if (text == "name") {
    f.type = kName;
  } else if (text.starts_with("jsonpath=")) {
    text.remove_prefix(9);
    f.type = kJsonPath;
    if (text.empty()) return absl::InvalidArgumentError("template format specified but no template given");
    BERTH_ASSIGN_OR_RETURN(JsonPathTemplate t, JsonPathTemplate::Parse(unquote(text)));
    f.jsonpath = std::move(t);
  } else if (text.starts_with("custom-columns=")) {
    text.remove_prefix(15);
    f.type = kCustomColumns;
    BERTH_ASSIGN_OR_RETURN(f.columns, ParseCustomColumns(unquote(text)));
  } else {
    return absl::InvalidArgumentError(StrCat("unable to match a printer suitable for the output format \"", text,
                                             "\", allowed formats are: custom-columns,json,jsonpath,name,wide,yaml"));
  }
  return f;
}

absl::Status SortObjects(std::vector<json>& objects, std::string_view expr) {
  // The key of each object, computed once: (has value, number, text).
  struct Key {
    bool present = false;
    bool numeric = false;
    double number = 0;
    std::string text;
  };
  std::vector<std::pair<Key, json>> keyed;
  for (json& o : objects) {
    BERTH_ASSIGN_OR_RETURN(std::vector<json> got, JsonPathSelect(o, expr));
    Key k;
    if (!got.empty() && !got.front().is_null()) {
      const json& v = got.front();
      k.present = true;
      if (v.is_number()) {
        k.numeric = true;
        k.number = v.get<double>();
      } else if (v.is_string()) {
        k.text = v.get<std::string>();
        if (auto q = api::Quantity::Parse(k.text);
            q.ok() && !k.text.empty() && std::isdigit(static_cast<unsigned char>(k.text[0]))) {
          k.numeric = true;
          k.number = static_cast<double>(q->Value());
        }
      } else {
        k.text = v.dump();
      }
    }
    keyed.emplace_back(std::move(k), std::move(o));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
    const Key &x = a.first, &y = b.first;
    if (x.present != y.present) return !x.present;
    if (x.numeric && y.numeric) return x.number < y.number;
    if (x.numeric != y.numeric) return x.numeric;
    return x.text < y.text;
  });
  objects.clear();
  for (auto& [k, o] : keyed) objects.push_back(std::move(o));
  return absl::OkStatus();
}

json ListOf(std::vector<json> items) {
  return {{"apiVersion", "v1"}, {"kind", "List"}, {"items", std::move(items)}, {"metadata", {{"resourceVersion", ""}}}};
}

namespace {

std::string Name(const json& o) { return o.value("metadata", json::object()).value("name", ""); }

std::string RenderTableFor(const KindObjects& g, const PrintOptions& options, absl::Time now) {
  json table = api::BuildTable(*g.kind, g.items, now, "");
  if (options.with_kind) {
    size_t name_col = 0;
    const json& cols = table["columnDefinitions"];
    for (size_t i = 0; i < cols.size(); ++i) {
      if (cols[i].value("format", "") == "name") name_col = i;
    }
    for (json& row : table["rows"]) {
      json& cell = row["cells"][name_col];
      if (cell.is_string()) cell = TypedName(*g.kind, cell.get<std::string>());
    }
  }
  return api::RenderTable(table, options.format.type == OutputFormat::kWide,
                          options.with_namespace && g.kind->namespaced, options.headers);
}

std::string RenderCustomColumns(const std::vector<CustomColumn>& columns, const std::vector<const json*>& objects,
                                bool headers) {
  std::vector<std::vector<std::string>> lines;
  if (headers) {
    std::vector<std::string>& h = lines.emplace_back();
    for (const auto& c : columns) h.push_back(c.header);
  }
  for (const json* o : objects) {
    std::vector<std::string>& line = lines.emplace_back();
    for (const auto& c : columns) {
      auto got = JsonPathSelect(*o, c.path);
      std::vector<std::string> texts;
      if (got.ok()) {
        for (const json& v : *got) texts.push_back(JsonPathValueText(v));
      }
      line.push_back(texts.empty() ? "<none>" : absl::StrJoin(texts, ","));
    }
  }
  return api::Tabulate(lines);
}

}  // namespace

std::string PrintObjects(const std::vector<KindObjects>& groups, const PrintOptions& options, absl::Time now) {
  std::vector<const json*> all;
  for (const auto& g : groups) {
    for (const auto& o : g.items) all.push_back(&o);
  }
  auto document = [&]() -> json {
    if (options.single && all.size() == 1) return *all.front();
    std::vector<json> items;
    for (const json* o : all) items.push_back(*o);
    return ListOf(std::move(items));
  };
  std::string out;
  switch (options.format.type) {
    case OutputFormat::kJson:
      return document().dump(4) + "\n";
    case OutputFormat::kYaml:
      return api::EncodeYaml(document());
    case OutputFormat::kJsonPath:
      return options.format.jsonpath->Execute(document());
    case OutputFormat::kName:
      for (const auto& g : groups) {
        for (const auto& o : g.items) out += TypedName(*g.kind, Name(o)) + "\n";
      }
      return out;
    case OutputFormat::kCustomColumns:
      return RenderCustomColumns(options.format.columns, all, options.headers);
    case OutputFormat::kTable:
    case OutputFormat::kWide:
      for (const auto& g : groups) {
        if (g.items.empty()) continue;
        if (!out.empty()) out += "\n";
        out += RenderTableFor(g, options, now);
      }
      return out;
  }
  return out;
}

}  // namespace berth::cli
