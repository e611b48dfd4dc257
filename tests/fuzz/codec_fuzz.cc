// libFuzzer target for the manifest decoder: any input must either be
// refused with a status or decode to objects that survive an encode/decode
// round trip unchanged. Crashes, hangs, sanitizer reports and round-trip
// mismatches are findings.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "api/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto docs = berth::api::DecodeManifests(text);
  if (!docs.ok()) return 0;
  for (const auto& doc : *docs) {
    const std::string yaml = berth::api::EncodeYaml(doc);
    auto back = berth::api::DecodeManifests(yaml);
    if (!back.ok() || back->size() != 1 || (*back)[0] != doc) std::abort();
  }
  return 0;
}
