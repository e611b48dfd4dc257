#include "csi/redact.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "csi/v1/csi.pb.h"

namespace berth::csi {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void AppendQuoted(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void AppendMessage(const Message& m, std::string* out);

// One value of a field: element `index` of a repeated field, or the singular
// value when index < 0.
void AppendValue(const Message& m, const FieldDescriptor& f, int index, std::string* out) {
  const Reflection& r = *m.GetReflection();
  const bool rep = index >= 0;
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      absl::StrAppend(out, rep ? r.GetRepeatedInt32(m, &f, index) : r.GetInt32(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      absl::StrAppend(out, rep ? r.GetRepeatedInt64(m, &f, index) : r.GetInt64(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      absl::StrAppend(out, rep ? r.GetRepeatedUInt32(m, &f, index) : r.GetUInt32(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      absl::StrAppend(out, rep ? r.GetRepeatedUInt64(m, &f, index) : r.GetUInt64(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      absl::StrAppend(out, rep ? r.GetRepeatedDouble(m, &f, index) : r.GetDouble(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      absl::StrAppend(out, rep ? r.GetRepeatedFloat(m, &f, index) : r.GetFloat(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out->append((rep ? r.GetRepeatedBool(m, &f, index) : r.GetBool(m, &f)) ? "true" : "false");
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* v = rep ? r.GetRepeatedEnum(m, &f, index) : r.GetEnum(m, &f);
      AppendQuoted(v->name(), out);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string scratch;
      const std::string& s =
          rep ? r.GetRepeatedStringReference(m, &f, index, &scratch) : r.GetStringReference(m, &f, &scratch);
      if (f.type() == FieldDescriptor::TYPE_BYTES) {
        absl::StrAppend(out, "\"<", s.size(), " bytes>\"");
      } else {
        AppendQuoted(s, out);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      AppendMessage(rep ? r.GetRepeatedMessage(m, &f, index) : r.GetMessage(m, &f), out);
      break;
  }
}

// A map field as {"key":value,...} with keys in sorted order (map iteration
// order on the wire is unspecified; sorted output keeps logs diffable).
void AppendMap(const Message& m, const FieldDescriptor& f, std::string* out) {
  const Reflection& r = *m.GetReflection();
  const FieldDescriptor* key_f = f.message_type()->map_key();
  const FieldDescriptor* value_f = f.message_type()->map_value();
  std::vector<std::pair<std::string, const Message*>> entries;
  const int n = r.FieldSize(m, &f);
  entries.reserve(n);
  for (int i = 0; i < n; ++i) {
    const Message& entry = r.GetRepeatedMessage(m, &f, i);
    std::string key;
    AppendValue(entry, *key_f, -1, &key);
    entries.emplace_back(std::move(key), &entry);
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out->push_back('{');
  bool first = true;
  for (const auto& [key, entry] : entries) {
    if (!first) out->push_back(',');
    first = false;
    // Keys of integer maps are printed bare by AppendValue; JSON keys are strings.
    if (key.empty() || key.front() != '"') {
      AppendQuoted(key, out);
    } else {
      out->append(key);
    }
    out->push_back(':');
    AppendValue(*entry, *value_f, -1, out);
  }
  out->push_back('}');
}

void AppendMessage(const Message& m, std::string* out) {
  const Reflection& r = *m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r.ListFields(m, &fields);  // set fields only, in field-number order
  out->push_back('{');
  bool first = true;
  for (const FieldDescriptor* f : fields) {
    if (!first) out->push_back(',');
    first = false;
    AppendQuoted(f->name(), out);
    out->push_back(':');
    if (IsSecretField(*f)) {
      AppendQuoted(kStripped, out);
    } else if (f->is_map()) {
      AppendMap(m, *f, out);
    } else if (f->is_repeated()) {
      out->push_back('[');
      const int n = r.FieldSize(m, f);
      for (int i = 0; i < n; ++i) {
        if (i > 0) out->push_back(',');
        AppendValue(m, *f, i, out);
      }
      out->push_back(']');
    } else {
      AppendValue(m, *f, -1, out);
    }
  }
  out->push_back('}');
}

}  // namespace

bool IsSecretField(const FieldDescriptor& field) { return field.options().GetExtension(::csi::v1::csi_secret); }

std::string RedactedDebugString(const Message& message) {
  std::string out;
  AppendMessage(message, &out);
  return out;
}

}  // namespace berth::csi
