// DumpJson against nlohmann's dump(), byte for byte: fixed cases for every
// kind of value and escape, then random trees of random bytes under each
// error handler (the same text, or the same exception).
#include "api/json_text.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace berth::api {
namespace {

using nlohmann::json;

constexpr json::error_handler_t kHandlers[] = {json::error_handler_t::strict, json::error_handler_t::replace,
                                               json::error_handler_t::ignore};

// Both succeed with the same text, or both throw the same error.
void ExpectSameAsDump(const json& v) {
  for (json::error_handler_t h : kHandlers) {
    std::string want, got, want_error, got_error;
    try {
      want = v.dump(-1, ' ', false, h);
    } catch (const json::exception& e) {
      want_error = e.what();
    }
    try {
      got = DumpJson(v, h);
    } catch (const json::exception& e) {
      got_error = e.what();
    }
    EXPECT_EQ(got, want) << "handler " << static_cast<int>(h);
    EXPECT_EQ(got_error, want_error) << "handler " << static_cast<int>(h);
  }
}

TEST(JsonTextTest, ScalarsAreDumpedAsNlohmannDoes) {
  for (const json& v : {json(nullptr),
                        json(true),
                        json(false),
                        json(0),
                        json(-1),
                        json(42),
                        json(std::numeric_limits<int64_t>::min()),
                        json(std::numeric_limits<int64_t>::max()),
                        json(std::numeric_limits<uint64_t>::max()),
                        json(uint64_t{0}),
                        json(0.0),
                        json(-0.0),
                        json(1.0),
                        json(0.1),
                        json(1e300),
                        json(-2.5e-7),
                        json(std::nan("")),
                        json(std::numeric_limits<double>::infinity()),
                        json(""),
                        json("plain"),
                        json::binary({1, 2, 3}),
                        json::binary({4}, 7)}) {
    ExpectSameAsDump(v);
  }
  EXPECT_EQ(DumpJson(json(7)), "7");
  EXPECT_EQ(DumpJson(json(std::numeric_limits<int64_t>::min())), "-9223372036854775808");
}

TEST(JsonTextTest, EveryControlCharacterAndQuoteIsEscapedAsNlohmannDoes) {
  std::string all;
  for (int c = 0; c < 0x80; ++c) all.push_back(static_cast<char>(c));
  ExpectSameAsDump(json(all));
  for (int c = 0; c < 0x80; ++c) ExpectSameAsDump(json(std::string(1, static_cast<char>(c))));
  EXPECT_EQ(DumpJson(json("a\"b\\c\nd\x01\x1f/\x7f")), "\"a\\\"b\\\\c\\nd\\u0001\\u001f/\x7f\"");
}

TEST(JsonTextTest, NonAsciiIsCheckedAsNlohmannDoes) {
  ExpectSameAsDump(json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\xb3"));  // valid UTF-8, kept as is
  EXPECT_EQ(DumpJson(json("\xc3\xa9")), "\"\xc3\xa9\"");
  for (const char* bad : {"\xff", "ab\xc3", "\xc3\x28", "\xe2\x82", "\xed\xa0\x80", "x\x80y\"z"}) {
    ExpectSameAsDump(json(bad));
    ExpectSameAsDump(json::object({{bad, 1}}));  // in a key too
  }
  EXPECT_THROW(DumpJson(json("\xff")), json::type_error);
  EXPECT_EQ(DumpJson(json("a\xff"), json::error_handler_t::replace), "\"a\xef\xbf\xbd\"");
}

TEST(JsonTextTest, ContainersAndAnApiObjectAreDumpedAsNlohmannDoes) {
  ExpectSameAsDump(json::object());
  ExpectSameAsDump(json::array());
  ExpectSameAsDump(json::array({json::object(), json::array(), nullptr, json::array({json::array()})}));
  const json claim = json::parse(R"({
    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
    "metadata": {"name": "claim-1", "namespace": "default", "uid": "0f0e", "resourceVersion": "17",
      "generation": 1, "finalizers": ["kubernetes.io/pvc-protection"],
      "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
        "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{\"annotations\":{},\"name\":\"claim-1\"}}\n",
        "pv.kubernetes.io/bind-completed": "yes"}},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
      "storageClassName": "instant", "volumeMode": "Filesystem", "volumeName": "pvc-0f0e"},
    "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}, "ratio": 0.75}})");
  ExpectSameAsDump(claim);
  std::string appended = "prefix:";
  AppendJson(appended, claim);
  EXPECT_EQ(appended, "prefix:" + claim.dump());
}

// A random value: containers up to `depth`, strings of bytes that are mostly
// the interesting ones (escapes, control characters, UTF-8 lead and
// continuation bytes, invalid bytes).
json RandomValue(std::mt19937_64& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  auto random_string = [&] {
    static const std::string kBytes =
        std::string("ab/\"\\\b\f\n\r\t\x01\x1f\x7f") + "\xc3\xa9\xe2\x82\xac\xf0\x9f\x90\xb3\x80\xbf\xff\xfe";
    std::string s;
    const int n = pick(12);
    for (int i = 0; i < n; ++i)
      s.push_back(pick(3) == 0 ? kBytes[pick(static_cast<int>(kBytes.size()))] : 'a' + pick(26));
    return s;
  };
  switch (depth > 0 ? pick(9) : pick(7)) {
    case 0:
      return nullptr;
    case 1:
      return pick(2) == 0;
    case 2:
      return static_cast<int64_t>(rng());
    case 3:
      return static_cast<uint64_t>(rng());
    case 4:
      return std::ldexp(static_cast<double>(static_cast<int64_t>(rng() >> 11)), pick(200) - 100);
    case 5:
    case 6:
      return random_string();
    case 7: {
      json a = json::array();
      for (int i = pick(5); i > 0; --i) a.push_back(RandomValue(rng, depth - 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = pick(5); i > 0; --i) o[random_string()] = RandomValue(rng, depth - 1);
      return o;
    }
  }
}

TEST(JsonTextTest, RandomValuesAreDumpedAsNlohmannDoes) {
  std::mt19937_64 rng(31);
  for (int i = 0; i < 3000; ++i) ExpectSameAsDump(RandomValue(rng, 4));
}

std::string Msgpack(const json& v) {
  std::string out;
  AppendMsgpack(out, v);
  return out;
}

// nlohmann's own.
std::string Nl(const json& v) {
  std::string out;
  json::to_msgpack(v, out);
  return out;
}

TEST(JsonTextTest, MsgpackIsWhatNlohmannWrites) {
  // Every integer width and its edges, both signs; every length form.
  for (int64_t edge : {int64_t{0}, int64_t{1}, int64_t{127}, int64_t{128}, int64_t{255}, int64_t{256}, int64_t{65535},
                       int64_t{65536}, int64_t{4294967295}, int64_t{4294967296}}) {
    for (int64_t i : {edge, -edge, edge - 1, -edge - 1, -edge + 1}) {
      EXPECT_EQ(Msgpack(json(i)), Nl(json(i))) << i;
      if (i >= 0) {
        EXPECT_EQ(Msgpack(json(static_cast<uint64_t>(i))), Nl(json(static_cast<uint64_t>(i))));
      }
    }
  }
  for (int64_t i : {int64_t{-32}, int64_t{-33}, int64_t{-128}, int64_t{-129}, int64_t{-32768}, int64_t{-32769},
                    std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    EXPECT_EQ(Msgpack(json(i)), Nl(json(i))) << i;
  }
  EXPECT_EQ(Msgpack(json(std::numeric_limits<uint64_t>::max())), Nl(json(std::numeric_limits<uint64_t>::max())));
  for (size_t n : {0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536}) {
    const json s(std::string(n, 'x'));
    EXPECT_EQ(Msgpack(s), Nl(s)) << n;
    json a = json::array(), o = json::object();
    for (size_t i = 0; i < n; ++i) a.push_back(nullptr);
    for (size_t i = 0; i < std::min<size_t>(n, 70000); ++i) o[std::to_string(i)] = i;
    EXPECT_EQ(Msgpack(a), Nl(a)) << n;
    EXPECT_EQ(Msgpack(o), Nl(o)) << n;
  }
  for (const json& v : {json(nullptr), json(true), json(false), json(0.5), json(1e300), json(-0.0),
                        json::binary({1, 2}), json::binary({1, 2, 3, 4}, 9)}) {
    EXPECT_EQ(Msgpack(v), Nl(v)) << v.dump();
  }
  std::string appended = "ab";
  AppendMsgpack(appended, json{{"k", 1}});
  EXPECT_EQ(appended, "ab" + Msgpack(json{{"k", 1}}));
  // Read back by nlohmann.
  const json claim = {{"metadata", {{"name", "c"}, {"labels", {{"a", "b"}}}}}, {"spec", {{"n", -7}, {"f", 0.25}}}};
  EXPECT_EQ(json::from_msgpack(Msgpack(claim)), claim);
}

TEST(JsonTextTest, RandomValuesArePackedAsNlohmannDoes) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 3000; ++i) {
    const json v = RandomValue(rng, 4);
    ASSERT_EQ(Msgpack(v), Nl(v)) << v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

}  // namespace
}  // namespace berth::api
