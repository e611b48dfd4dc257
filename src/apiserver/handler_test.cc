#include "apiserver/handler.h"

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/testing/recording_writer.h"

namespace berth::apiserver {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// What a handler answers (http/testing/recording_writer.h), read as JSON.
struct RecordingWriter : http::testing::RecordingWriter {
  json Json() const { return json::parse(body); }
};

class HandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(*store::Store::Open({.path = dir_.path() + "/state.db"}));
    registry_ = std::make_unique<Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
    handler_ = std::make_unique<ApiHandler>(
        *registry_,
        ApiHandler::Options{.bookmark_interval = absl::Seconds(30), .max_watch = absl::Seconds(60), .clock = &clock_});
  }
  RecordingWriter Do(const std::string& method, const std::string& target, const std::string& body = "",
                     const std::string& content_type = "application/json",
                     const std::string& accept = "application/json") {
    std::string raw = method + " " + target + " HTTP/1.1\r\nHost: x\r\nAccept: " + accept +
                      "\r\nContent-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\n\r\n" + body;
    auto req = http::ParseRequest(raw);
    EXPECT_TRUE(req.ok()) << req.status();
    RecordingWriter w;
    handler_->Handle(*req, w);
    return w;
  }
  static std::string Claim(const std::string& name) {
    return json({{"apiVersion", "v1"},
                 {"kind", "PersistentVolumeClaim"},
                 {"metadata", {{"name", name}}},
                 {"spec", {{"accessModes", {"ReadWriteOnce"}}, {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}})
        .dump();
  }

  FakeClock clock_;
  berth::testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<ApiHandler> handler_;
};

constexpr char kClaims[] = "/api/v1/namespaces/default/persistentvolumeclaims";

TEST_F(HandlerTest, DiscoveryDescribesEveryKind) {
  auto api = Do("GET", "/api");
  EXPECT_EQ(api.code, 200);
  EXPECT_EQ(api.Json()["versions"], json({"v1"}));
  auto groups = Do("GET", "/apis").Json();
  std::vector<std::string> names;
  for (const auto& g : groups["groups"]) names.push_back(g["name"]);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("storage.k8s.io", "snapshot.storage.k8s.io", "coordination.k8s.io",
                                                     "events.k8s.io", "backup.berth.io"));
  EXPECT_EQ(Do("GET", "/apis/events.k8s.io/v1").Json()["resources"][0]["name"], "events");
  EXPECT_EQ(Do("GET", "/apis/events.k8s.io").Json()["preferredVersion"]["groupVersion"], "events.k8s.io/v1");
  EXPECT_EQ(Do("GET", "/apis/coordination.k8s.io/v1").Json()["resources"][0]["name"], "leases");
  auto core = Do("GET", "/api/v1").Json();
  bool found_pvc = false, found_status = false;
  for (const auto& r : core["resources"]) {
    if (r["name"] == "persistentvolumeclaims") {
      found_pvc = true;
      EXPECT_EQ(r["shortNames"], json({"pvc"}));
      EXPECT_EQ(r["namespaced"], true);
      EXPECT_EQ(r["kind"], "PersistentVolumeClaim");
    }
    found_status = found_status || r["name"] == "persistentvolumeclaims/status";
  }
  EXPECT_TRUE(found_pvc);
  EXPECT_TRUE(found_status);
  EXPECT_EQ(Do("GET", "/apis/snapshot.storage.k8s.io/v1").Json()["groupVersion"], "snapshot.storage.k8s.io/v1");
  json backups = Do("GET", "/apis/backup.berth.io/v1").Json();
  std::vector<std::string> resources;
  for (const auto& r : backups["resources"]) resources.push_back(r["name"]);
  EXPECT_THAT(resources, ::testing::IsSupersetOf({"backupstoragelocations", "backups", "backups/status", "restores",
                                                  "schedules", "schedules/status"}));
  EXPECT_EQ(Do("GET", "/version").Json()["major"], "1");
  EXPECT_EQ(Do("GET", "/apis/nosuch.io/v1").code, 404);
  EXPECT_EQ(Do("GET", "/openapi/v2", "", "", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf").body, "");
}

TEST_F(HandlerTest, CrudWithKubernetesStatusCodes) {
  auto created = Do("POST", kClaims, Claim("data"));
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.Json()["status"]["phase"], "Pending");
  // The response is the stored object, byte for byte what a GET returns.
  EXPECT_EQ(created.body, Do("GET", std::string(kClaims) + "/data").body);
  EXPECT_EQ(created.content_type, "application/json");
  auto dup = Do("POST", kClaims, Claim("data"));
  EXPECT_EQ(dup.code, 409);
  EXPECT_EQ(dup.Json()["kind"], "Status");
  EXPECT_EQ(dup.Json()["reason"], "AlreadyExists");

  auto missing = Do("GET", std::string(kClaims) + "/nosuch");
  EXPECT_EQ(missing.code, 404);
  EXPECT_EQ(missing.Json()["reason"], "NotFound");
  EXPECT_EQ(missing.Json()["message"], "persistentvolumeclaims \"nosuch\" not found");

  auto invalid =
      Do("POST", kClaims, R"({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"x"},"spec":{}})");
  EXPECT_EQ(invalid.code, 422);
  EXPECT_EQ(invalid.Json()["reason"], "Invalid");
  EXPECT_THAT(invalid.Json()["message"].get<std::string>(), HasSubstr("spec.accessModes: Required value"));

  auto unknown =
      Do("POST", kClaims, R"({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"x"},"spek":{}})");
  EXPECT_EQ(unknown.code, 400);
  EXPECT_THAT(unknown.Json()["message"].get<std::string>(), HasSubstr("unknown field \"spek\""));
  EXPECT_EQ(Do("POST", kClaims, "{not json").code, 400);

  json got = Do("GET", std::string(kClaims) + "/data").Json();
  json stale = got;
  got["metadata"]["labels"] = {{"a", "b"}};
  EXPECT_EQ(Do("PUT", std::string(kClaims) + "/data", got.dump()).code, 200);
  stale["metadata"]["labels"] = {{"a", "c"}};
  auto conflict = Do("PUT", std::string(kClaims) + "/data", stale.dump());
  EXPECT_EQ(conflict.code, 409);
  EXPECT_EQ(conflict.Json()["reason"], "Conflict");

  auto patched = Do("PATCH", std::string(kClaims) + "/data", R"({"metadata":{"labels":{"x":"y"}}})",
                    "application/merge-patch+json");
  EXPECT_EQ(patched.code, 200);
  EXPECT_EQ(patched.Json()["metadata"]["labels"], json({{"a", "b"}, {"x", "y"}}));
  auto status = Do("PATCH", std::string(kClaims) + "/data/status", R"({"status":{"phase":"Bound"}})",
                   "application/merge-patch+json");
  EXPECT_EQ(status.code, 200);
  EXPECT_EQ(status.Json()["status"]["phase"], "Bound");
  EXPECT_EQ(Do("PATCH", std::string(kClaims) + "/data", "{}", "text/plain").code, 415);
  EXPECT_EQ(Do("GET", std::string(kClaims) + "/data/nosub").code, 404);

  auto deleted = Do("DELETE", std::string(kClaims) + "/data");
  EXPECT_EQ(deleted.code, 200);
  EXPECT_EQ(Do("GET", std::string(kClaims) + "/data").code, 404);
  EXPECT_EQ(Do("DELETE", std::string(kClaims) + "/data").code, 404);
}

// kubectl --dry-run=server: the same checks and answers as the write, and
// nothing stored (no new resourceVersion, so no watch event).
TEST_F(HandlerTest, DryRunChecksEverythingAndStoresNothing) {
  const std::string data = std::string(kClaims) + "/data";
  auto would = Do("POST", std::string(kClaims) + "?dryRun=All", Claim("data"));
  ASSERT_EQ(would.code, 201) << would.body;
  EXPECT_EQ(would.Json()["metadata"]["name"], "data");
  EXPECT_EQ(would.Json()["status"]["phase"], "Pending");
  EXPECT_EQ(Do("GET", data).code, 404);
  EXPECT_EQ(Do("POST", std::string(kClaims) + "?dryRun=All",
               R"({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"x"},"spec":{}})")
                .code,
            422);

  ASSERT_EQ(Do("POST", kClaims, Claim("data")).code, 201);
  EXPECT_EQ(Do("POST", std::string(kClaims) + "?dryRun=All", Claim("data")).code, 409);
  const int64_t rv = registry_->store().ResourceVersion();
  json got = Do("GET", data).Json();
  got["metadata"]["labels"] = {{"a", "b"}};
  auto put = Do("PUT", data + "?dryRun=All", got.dump());
  EXPECT_EQ(put.code, 200) << put.body;
  EXPECT_EQ(put.Json()["metadata"]["labels"]["a"], "b");
  auto patch = Do("PATCH", data + "?dryRun=All&fieldManager=kubectl-client-side-apply",
                  R"({"metadata":{"labels":{"x":"y"}}})", "application/merge-patch+json");
  EXPECT_EQ(patch.code, 200) << patch.body;
  EXPECT_EQ(patch.Json()["metadata"]["labels"]["x"], "y");
  // Immutable fields are still refused.
  EXPECT_EQ(
      Do("PATCH", data + "?dryRun=All", R"({"spec":{"accessModes":["ReadWriteMany"]}})", "application/merge-patch+json")
          .code,
      422);
  EXPECT_EQ(Do("DELETE", data + "?dryRun=All").code, 200);
  // kubectl delete --dry-run=server: DeleteOptions in the body.
  EXPECT_EQ(Do("DELETE", data, R"({"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"]})").code, 200);
  EXPECT_EQ(Do("DELETE", data, R"({"dryRun":["Some"]})").code, 422);
  EXPECT_EQ(Do("DELETE", std::string(kClaims) + "/nosuch?dryRun=All").code, 404);
  EXPECT_EQ(registry_->store().ResourceVersion(), rv);
  json stored = Do("GET", data).Json();
  EXPECT_FALSE(stored["metadata"].contains("labels")) << stored.dump();

  auto bogus = Do("POST", std::string(kClaims) + "?dryRun=Some", Claim("other"));
  EXPECT_EQ(bogus.code, 422);
  EXPECT_THAT(bogus.Json()["message"].get<std::string>(), HasSubstr("dryRun: Unsupported value: \"Some\""));
}

TEST_F(HandlerTest, ListAsTableAndAcrossNamespaces) {
  ASSERT_EQ(Do("POST", kClaims, Claim("a")).code, 201);
  ASSERT_EQ(Do("POST", kClaims, Claim("b")).code, 201);
  auto list = Do("GET", "/api/v1/persistentvolumeclaims").Json();
  EXPECT_EQ(list["kind"], "PersistentVolumeClaimList");
  EXPECT_EQ(list["items"].size(), 2u);
  auto table = Do("GET", kClaims, "", "", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json").Json();
  EXPECT_EQ(table["kind"], "Table");
  EXPECT_EQ(table["rows"].size(), 2u);
  EXPECT_EQ(table["rows"][0]["cells"][0], "a");
  EXPECT_EQ(table["columnDefinitions"][1]["name"], "Status");
  auto page = Do("GET", std::string(kClaims) + "?limit=1").Json();
  EXPECT_EQ(page["items"].size(), 1u);
  EXPECT_FALSE(page["metadata"]["continue"].get<std::string>().empty());
  auto selected = Do("GET", std::string(kClaims) + "?fieldSelector=metadata.name%3Db").Json();
  ASSERT_EQ(selected["items"].size(), 1u);
  EXPECT_EQ(Do("GET", std::string(kClaims) + "?labelSelector=a%20in%20(").code, 400);
}

TEST_F(HandlerTest, AWholeListLargerThanAChunkIsStreamedInOrder) {
  // 150 claims of ~1 KiB: more than one 64 KiB chunk, so the list goes out
  // as the store reads it, in chunks that together are one list.
  for (int i = 0; i < 150; ++i) {
    json claim = json::parse(Claim(absl::StrCat("c-", 1000 + i)));
    claim["metadata"]["labels"] = {{"half", i % 2 == 0 ? "even" : "odd"}};
    claim["metadata"]["annotations"] = {{"note", std::string(900, 'x')}};
    ASSERT_EQ(Do("POST", kClaims, claim.dump()).code, 201);
  }
  RecordingWriter all = Do("GET", "/api/v1/persistentvolumeclaims");
  EXPECT_EQ(all.code, 200);
  ASSERT_NE(all.stream, nullptr) << "sent whole: " << all.body.size() << " bytes";
  EXPECT_GE(all.stream->chunks().size(), 2u);
  const json list = json::parse(all.stream->text());
  EXPECT_EQ(list["kind"], "PersistentVolumeClaimList");
  EXPECT_EQ(list["apiVersion"], "v1");
  EXPECT_EQ(list["metadata"]["resourceVersion"], std::to_string(store_->ResourceVersion()));
  ASSERT_EQ(list["items"].size(), 150u);
  for (int i = 0; i < 150; ++i) EXPECT_EQ(list["items"][i]["metadata"]["name"], absl::StrCat("c-", 1000 + i));
  // Selectors filter the streamed list too.
  RecordingWriter even = Do("GET", std::string(kClaims) + "?labelSelector=half%3Deven");
  const json evens = json::parse(even.stream != nullptr ? even.stream->text() : even.body);
  EXPECT_EQ(evens["items"].size(), 75u);
  RecordingWriter one = Do("GET", std::string(kClaims) + "?fieldSelector=metadata.name%3Dc-1007");
  const json named = json::parse(one.stream != nullptr ? one.stream->text() : one.body);
  ASSERT_EQ(named["items"].size(), 1u);
  EXPECT_EQ(named["items"][0]["metadata"]["labels"]["half"], "odd");
}

TEST(ApiHandlerLongRunningTest, WatchesAndFollowedLogsAreLongRunning) {
  auto long_running = [](const std::string& method, const std::string& target) {
    auto req = http::ParseRequest(method + " " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    EXPECT_TRUE(req.ok()) << target;
    return req.ok() && ApiHandler::IsLongRunning(*req);
  };
  EXPECT_TRUE(long_running("GET", "/api/v1/persistentvolumes?watch=1"));
  EXPECT_TRUE(long_running("GET", "/api/v1/namespaces/default/pods?watch=true&resourceVersion=5"));
  EXPECT_TRUE(long_running("GET", "/api/v1/namespaces/default/pods/web/log?follow=true&container=c"));
  EXPECT_FALSE(long_running("GET", "/api/v1/namespaces/default/pods/web/log"));
  EXPECT_FALSE(long_running("GET", "/api/v1/namespaces/default/pods/web/log?follow=false"));
  EXPECT_FALSE(long_running("GET", "/api/v1/persistentvolumes"));
  EXPECT_FALSE(long_running("POST", "/api/v1/namespaces/default/pods?watch=1"));
  EXPECT_TRUE(long_running("POST", "/api/v1/namespaces/default/pods/web/exec?command=ls&stdout=true"));
  EXPECT_TRUE(long_running("GET", "/api/v1/namespaces/default/pods/web/exec?command=ls&stdout=true"));
  EXPECT_TRUE(long_running("POST", "/api/v1/namespaces/default/pods/web/attach?stdout=true"));
}

TEST_F(HandlerTest, SubresourcesServedElsewhereTakeTheirMethodsAndAreDiscovered) {
  std::vector<std::string> seen;
  handler_->AddSubresource(
      "pods", "exec",
      [&](const HttpRequest& r, ResponseWriter& w, const std::string& ns, const std::string& name) {
        seen.push_back(r.method + " " + ns + "/" + name);
        w.Send(200, "text/plain", "ok");
        return absl::OkStatus();
      },
      {"GET", "POST"});
  EXPECT_EQ(Do("POST", "/api/v1/namespaces/default/pods/web/exec?command=ls").code, 200);
  EXPECT_EQ(Do("GET", "/api/v1/namespaces/default/pods/web/exec?command=ls").code, 200);
  EXPECT_EQ(Do("PUT", "/api/v1/namespaces/default/pods/web/exec").code, 405);
  EXPECT_THAT(seen, ::testing::ElementsAre("POST default/web", "GET default/web"));
  // Not registered: 404.
  EXPECT_EQ(Do("POST", "/api/v1/namespaces/default/pods/web/portforward").code, 404);
  std::map<std::string, json> core;
  const json list = Do("GET", "/api/v1").Json();
  for (const auto& r : list["resources"]) core[r["name"]] = r;
  ASSERT_TRUE(core.count("pods/exec"));
  EXPECT_EQ(core["pods/exec"]["kind"], "PodExecOptions");
  EXPECT_EQ(core["pods/exec"]["verbs"], json({"create", "get"}));
  ASSERT_TRUE(core.count("pods/attach"));
  EXPECT_EQ(core["pods/attach"]["kind"], "PodAttachOptions");
}

TEST_F(HandlerTest, WatchStreamsEventsInOrderAndExpiredIs410) {
  ASSERT_EQ(Do("POST", kClaims, Claim("a")).code, 201);
  std::string rv = Do("GET", kClaims).Json()["metadata"]["resourceVersion"];
  ASSERT_EQ(
      Do("PATCH", std::string(kClaims) + "/a", R"({"metadata":{"labels":{"x":"1"}}})", "application/merge-patch+json")
          .code,
      200);
  ASSERT_EQ(Do("DELETE", std::string(kClaims) + "/a").code, 200);
  std::string raw = "GET " + std::string(kClaims) + "?watch=1&resourceVersion=" + rv +
                    "&allowWatchBookmarks=true HTTP/1.1\r\nHost: x\r\n\r\n";
  auto req = http::ParseRequest(raw);
  ASSERT_TRUE(req.ok());
  RecordingWriter w;
  handler_->Handle(*req, w);  // returns at once: the hub goes on with the stream
  ASSERT_NE(w.stream, nullptr);
  ASSERT_TRUE(berth::testing::Eventually([&] { return w.stream->chunks().size() == 2; }));  // MODIFIED, DELETED
  clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(berth::testing::Eventually([&] { return w.stream->chunks().size() == 3; }));  // BOOKMARK
  const std::vector<std::string> chunks = w.stream->chunks();
  EXPECT_EQ(json::parse(chunks[0])["type"], "MODIFIED");
  EXPECT_EQ(json::parse(chunks[0])["object"]["metadata"]["labels"]["x"], "1");
  EXPECT_EQ(json::parse(chunks[1])["type"], "DELETED");
  json bookmark = json::parse(chunks[2]);
  EXPECT_EQ(bookmark["type"], "BOOKMARK");
  EXPECT_EQ(bookmark["object"]["metadata"]["resourceVersion"],
            json::parse(chunks[1])["object"]["metadata"]["resourceVersion"]);
  // The deadline (max_watch) ends it; the hub lets it go.
  clock_.Advance(absl::Seconds(30));
  EXPECT_TRUE(berth::testing::Eventually([&] { return w.stream->Ended() && handler_->watches() == 0; }));
  EXPECT_EQ(w.stream->chunks().size(), 3u);
  EXPECT_EQ(Do("GET", std::string(kClaims) + "?watch=1&resourceVersion=abc").code, 400);
}

TEST_F(HandlerTest, WatchesLiveInTheHubUntilTheClientGoes) {
  auto req = http::ParseRequest("GET " + std::string(kClaims) + "?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(req.ok());
  std::vector<RecordingWriter> writers(3);
  for (auto& w : writers) handler_->Handle(*req, w);
  EXPECT_EQ(handler_->watches(), 3u);
  ASSERT_EQ(Do("POST", kClaims, Claim("a")).code, 201);
  for (auto& w : writers) {
    ASSERT_TRUE(berth::testing::Eventually([&] { return w.stream->chunks().size() == 1; }));
    EXPECT_EQ(json::parse(w.stream->chunks()[0])["type"], "ADDED");
  }
  writers[1].stream->Hangup();
  EXPECT_TRUE(berth::testing::Eventually([&] { return handler_->watches() == 2; }));
  ASSERT_EQ(Do("DELETE", std::string(kClaims) + "/a").code, 200);
  for (int i : {0, 2}) {
    ASSERT_TRUE(berth::testing::Eventually([&] { return writers[i].stream->chunks().size() == 2; }));
  }
  EXPECT_EQ(writers[1].stream->chunks().size(), 1u);
}

TEST_F(HandlerTest, SecretsNeverInTables) {
  auto created =
      Do("POST", "/api/v1/namespaces/default/secrets",
         R"({"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"password":"hunter2"}})");
  ASSERT_EQ(created.code, 201) << created.body;
  auto table = Do("GET", "/api/v1/namespaces/default/secrets", "", "", "application/json;as=Table;v=v1;g=meta.k8s.io");
  EXPECT_THAT(table.body, ::testing::Not(HasSubstr("aHVudGVyMg")));
  EXPECT_THAT(table.body, ::testing::Not(HasSubstr("hunter2")));
  EXPECT_EQ(table.Json()["rows"][0]["cells"][2], 1);  // DATA: one key
}

TEST_F(HandlerTest, PodBindingSubresource) {
  ASSERT_EQ(
      Do("POST", "/api/v1/namespaces/default/pods",
         R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}})")
          .code,
      201);
  auto bound =
      Do("POST", "/api/v1/namespaces/default/pods/p/binding",
         R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"p"},"target":{"kind":"Node","name":"n1"}})");
  EXPECT_EQ(bound.code, 201);
  EXPECT_EQ(Do("GET", "/api/v1/namespaces/default/pods/p").Json()["spec"]["nodeName"], "n1");
}

// events.k8s.io/v1 (client-go's tools/events: kube-scheduler, newer
// controllers) is core/v1 Events converted: written through one version,
// read, listed, patched and watched through the other.
TEST_F(HandlerTest, EventsV1AreCoreEventsConverted) {
  const std::string v1 = "/apis/events.k8s.io/v1/namespaces/default/events";
  const json event = {{"apiVersion", "events.k8s.io/v1"},
                      {"kind", "Event"},
                      {"metadata", {{"name", "data.1"}, {"namespace", "default"}}},
                      {"eventTime", "2026-11-26T03:00:00.000000Z"},
                      {"reportingController", "example.io/scheduler"},
                      {"reportingInstance", "scheduler-1"},
                      {"action", "Binding"},
                      {"reason", "Scheduled"},
                      {"type", "Normal"},
                      {"note", "assigned default/app to node-1"},
                      {"regarding", {{"kind", "Pod"}, {"namespace", "default"}, {"name", "app"}}}};
  const std::string rv = Do("GET", v1).Json()["metadata"]["resourceVersion"];
  auto created = Do("POST", v1, event.dump());
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.Json()["apiVersion"], "events.k8s.io/v1");
  EXPECT_EQ(created.Json()["note"], "assigned default/app to node-1");
  json core = Do("GET", "/api/v1/namespaces/default/events/data.1").Json();
  EXPECT_EQ(core["message"], "assigned default/app to node-1");
  EXPECT_EQ(core["involvedObject"]["name"], "app");
  EXPECT_EQ(core["reportingComponent"], "example.io/scheduler");

  // The series update tools/events sends.
  auto patched =
      Do("PATCH", v1 + "/data.1", R"({"series":{"count":2,"lastObservedTime":"2026-11-26T03:00:05.000000Z"}})",
         "application/strategic-merge-patch+json");
  ASSERT_EQ(patched.code, 200) << patched.body;
  EXPECT_EQ(patched.Json()["series"]["count"], 2);
  EXPECT_EQ(patched.Json()["regarding"]["name"], "app");
  json list = Do("GET", v1).Json();
  EXPECT_EQ(list["apiVersion"], "events.k8s.io/v1");
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["items"][0]["series"]["count"], 2);

  // A core/v1 event reads as events.k8s.io/v1.
  ASSERT_EQ(Do("POST", "/api/v1/namespaces/default/events",
               R"({"metadata":{"name":"old.1"},"involvedObject":{"kind":"Pod","namespace":"default","name":"app"},
                    "reason":"Pulled","message":"pulled","count":3,"type":"Normal"})")
                .code,
            201);
  json old = Do("GET", v1 + "/old.1").Json();
  EXPECT_EQ(old["note"], "pulled");
  EXPECT_EQ(old["deprecatedCount"], 3);
  EXPECT_FALSE(old.contains("message"));

  // Watched as events.k8s.io/v1.
  auto req = http::ParseRequest("GET " + v1 + "?watch=1&resourceVersion=" + rv + " HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(req.ok());
  RecordingWriter w;
  handler_->Handle(*req, w);
  ASSERT_NE(w.stream, nullptr);
  ASSERT_TRUE(berth::testing::Eventually([&] { return w.stream->chunks().size() == 3; }));
  const json first = json::parse(w.stream->chunks()[0]);
  EXPECT_EQ(first["type"], "ADDED");
  EXPECT_EQ(first["object"]["apiVersion"], "events.k8s.io/v1");
  EXPECT_EQ(first["object"]["note"], "assigned default/app to node-1");
  w.stream->Hangup();

  // The create rules of events.k8s.io/v1, and its field names only.
  json bad = event;
  bad["metadata"]["name"] = "data.2";
  bad.erase("eventTime");
  bad["deprecatedCount"] = 1;
  auto invalid = Do("POST", v1, bad.dump());
  EXPECT_EQ(invalid.code, 422);
  EXPECT_THAT(invalid.Json()["message"].get<std::string>(), HasSubstr("eventTime: Required value"));
  EXPECT_THAT(invalid.Json()["message"].get<std::string>(), HasSubstr("count: Invalid value"));
  json core_names = event;
  core_names["metadata"]["name"] = "data.3";
  core_names["message"] = "core field";
  EXPECT_EQ(Do("POST", v1, core_names.dump()).code, 400);
  EXPECT_EQ(Do("GET", "/apis/events.k8s.io/v1/namespaces/default/pods").code, 404);
}

// HoldBack waits while the backlog is over the limit: woken as soon as it
// fell and the Backlog's mutex is released, else every step; never longer
// than max_wait, and never with no limit.
TEST(HoldBackTest, WaitsWhileOverTheLimitWokenWhenItFallsAndNoLongerThanMaxWait) {
  const HoldBackOptions options{.limit = 10, .max_wait = absl::Milliseconds(5), .step = absl::Milliseconds(1)};
  FakeClock clock;
  std::atomic<int64_t> pending{12};
  auto read = [&] { return pending.load(); };

  // Falls, and says so: it goes at once, the clock never moved.
  absl::Duration waited = absl::InfiniteDuration();
  std::thread held([&] { waited = HoldBack(options, clock, read); });
  ASSERT_TRUE(clock.BlockUntilTimers(1));  // waiting, for at most a step
  pending = 10;
  { absl::MutexLock lock(&Backlog::mutex()); }
  held.join();
  EXPECT_EQ(waited, absl::ZeroDuration());

  // Falls without saying so: seen at the next step.
  pending = 12;
  std::thread stepped([&] { waited = HoldBack(options, clock, read); });
  ASSERT_TRUE(clock.BlockUntilTimers(1));
  clock.AdvanceToNextTimer();
  ASSERT_TRUE(clock.BlockUntilTimers(1));
  pending = 3;
  clock.AdvanceToNextTimer();
  stepped.join();
  EXPECT_EQ(waited, absl::Milliseconds(2));

  EXPECT_EQ(HoldBack(options, clock, read), absl::ZeroDuration()) << "under the limit: no wait";
  pending = 10;
  EXPECT_EQ(HoldBack(options, clock, read), absl::ZeroDuration()) << "at the limit: no wait";

  // A stuck controller: clients go ahead after max_wait.
  pending = 1000;
  std::thread stuck([&] { waited = HoldBack(options, clock, read); });
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(clock.BlockUntilTimers(1));
    clock.AdvanceToNextTimer();
  }
  stuck.join();
  EXPECT_EQ(waited, absl::Milliseconds(5));
  EXPECT_EQ(HoldBack({.limit = 0}, clock, read), absl::ZeroDuration()) << "0: never held back";
}

// Work taken releases the Backlog's mutex (which has absl look at a waiting
// create's condition again) only while someone watches: otherwise the
// queues' hot path takes no lock.
TEST(BacklogTest, WorkTakenWhileWatchedReleasesTheMutex) {
  const int64_t before = Backlog::wakes();
  Backlog::Add(1);
  Backlog::Add(-1);
  EXPECT_EQ(Backlog::wakes(), before) << "nobody watching";
  {
    Backlog::Watch watch;
    Backlog::Add(1);
    EXPECT_EQ(Backlog::wakes(), before) << "work queued wakes nobody";
    Backlog::Add(-1);
    EXPECT_EQ(Backlog::wakes(), before + 1);
  }
  Backlog::Add(1);
  Backlog::Add(-1);
  EXPECT_EQ(Backlog::wakes(), before + 1) << "the watch is over";
}

// The process's Backlog wakes a held-back create as the controllers take
// their work: no step of the clock is needed.
TEST(HoldBackTest, TheBacklogWakesTheWaitAsWorkIsTaken) {
  FakeClock clock;
  const HoldBackOptions options{
      .limit = Backlog::Pending() + 10, .max_wait = absl::Seconds(10), .step = absl::Seconds(10)};
  Backlog::Add(20);
  absl::Duration waited = absl::InfiniteDuration();
  std::thread held([&] { waited = HoldBack(options, clock); });
  ASSERT_TRUE(clock.BlockUntilTimers(1));
  for (int i = 0; i < 20; ++i) Backlog::Add(-1);  // a worker takes a key at a time
  held.join();
  EXPECT_EQ(waited, absl::ZeroDuration());
}

// A client's create waits on the handler's clock while the controllers are
// behind; what is written is unchanged; events are never held back.
TEST_F(HandlerTest, ACreateWaitsWhileTheControllersAreBehind) {
  std::atomic<int64_t> backlog{5000};
  handler_ = std::make_unique<ApiHandler>(
      *registry_, ApiHandler::Options{
                      .clock = &clock_,
                      .hold_back = {.limit = 2000, .max_wait = absl::Milliseconds(250), .step = absl::Milliseconds(1)},
                      .backlog = [&] { return backlog.load(); }});
  std::atomic<bool> done{false};
  RecordingWriter created;
  std::thread client([&] {
    created = Do("POST", kClaims, Claim("held"));
    done = true;
  });
  // Three steps of the fake clock, then the controllers catch up.
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(clock_.BlockUntilTimers(1));
    EXPECT_FALSE(done) << "went ahead while the backlog was over the limit";
    if (step == 2) backlog = 100;
    clock_.AdvanceToNextTimer();
  }
  client.join();
  EXPECT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.Json()["metadata"]["name"], "held");
  EXPECT_EQ(handler_->held_back().requests, 1);
  EXPECT_EQ(handler_->held_back().waited, absl::Milliseconds(3));

  backlog = 5000;
  const std::string event =
      json({{"apiVersion", "v1"},
            {"kind", "Event"},
            {"metadata", {{"name", "held.1"}}},
            {"involvedObject", {{"kind", "PersistentVolumeClaim"}, {"namespace", "default"}, {"name", "held"}}},
            {"reason", "Provisioning"},
            {"message", "m"},
            {"type", "Normal"}})
          .dump();
  EXPECT_EQ(Do("POST", "/api/v1/namespaces/default/events", event).code, 201) << "events never wait";
  EXPECT_EQ(handler_->held_back().requests, 1);
}

}  // namespace
}  // namespace berth::apiserver
