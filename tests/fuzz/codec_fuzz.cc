// libFuzzer target for the manifest decoder: any input must either be
// refused with a status or decode to objects that survive an encode/decode
// round trip unchanged, and that api::DumpJson and api::AppendMsgpack write
// exactly as nlohmann's dump() and to_msgpack do. Crashes, hangs,
// sanitizer reports and mismatches are findings.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "api/codec.h"
#include "api/json_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto docs = berth::api::DecodeManifests(text);
  if (!docs.ok()) return 0;
  for (const auto& doc : *docs) {
    const std::string yaml = berth::api::EncodeYaml(doc);
    auto back = berth::api::DecodeManifests(yaml);
    if (!back.ok() || back->size() != 1 || (*back)[0] != doc) std::abort();
    constexpr auto kReplace = nlohmann::json::error_handler_t::replace;  // nothing thrown on bad UTF-8
    if (berth::api::DumpJson(doc, kReplace) != doc.dump(-1, ' ', false, kReplace)) std::abort();
    std::string packed, nlohmann_packed;
    berth::api::AppendMsgpack(packed, doc);
    nlohmann::json::to_msgpack(doc, nlohmann_packed);
    if (packed != nlohmann_packed) std::abort();
  }
  return 0;
}
