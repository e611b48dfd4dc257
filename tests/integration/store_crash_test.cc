// The store's group commit under kill -9 (issue 31, item 3): `berth serve`
// as a process takes creates and updates of Secrets from several clients at once, each
// over its own kept-alive connection, so their writes share transactions and
// fsyncs. The test records every write the server acknowledged; at a seeded
// random moment (when the acknowledged writes reach a seeded count, so the
// kill lands while writes are in flight) it kill -9s the server, restarts it
// on the same data directory and checks that
//   - every acknowledged create is there, with at least the acknowledged
//     update's version of its data;
//   - nothing is half-written: every object there is whole (its payload is
//     the one the test wrote for its name and version), and is one the test
//     sent (an unacknowledged write may or may not have committed);
//   - the server takes writes again.
// Several rounds on one data directory: each round's objects must also
// survive the later kills.
//
// BERTH_TEST_SEED picks the seed (printed, so a failure can be replayed).
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "http/api_client.h"
#include "nlohmann/json.hpp"

namespace berth::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kClients = 8;
constexpr int kRounds = 4;
constexpr char kSecrets[] = "/api/v1/namespaces/default/secrets";
constexpr char kVersion[] = "test.berth.io/version";
constexpr char kPayload[] = "test.berth.io/payload";

// The payload of `name` at `version`: 1-4 KiB derived from both, so an
// object whose data was cut short or mixed with another write's is told
// apart from a whole one.
std::string Payload(const std::string& name, int version) {
  const size_t h = std::hash<std::string>{}(absl::StrCat(name, "#", version));
  const std::string unit = absl::StrCat(name, ":", version, ":", h, ";");
  std::string out;
  const size_t size = 1024 + h % 3072;
  while (out.size() < size) out += unit;
  return out;
}

// A Secret whose annotations carry its version and payload.
json Object(const std::string& name, int version) {
  return {
      {"apiVersion", "v1"},
      {"kind", "Secret"},
      {"type", "Opaque"},
      {"metadata",
       {{"name", name}, {"annotations", {{kVersion, std::to_string(version)}, {kPayload, Payload(name, version)}}}}}};
}

std::string Annotation(const json& object, const char* key) {
  return object["metadata"].value("annotations", json::object()).value(key, "");
}

// What the clients sent and what the server acknowledged, by object name.
struct Ledger {
  std::mutex mu;
  std::map<std::string, int> sent;   // the highest version sent (created: 1)
  std::map<std::string, int> acked;  // the highest version acknowledged
  std::atomic<int> acks{0};
};

class StoreCrashTest : public ::testing::Test {
 protected:
  void StartServer() {
    server_.reset();  // a killed one is reaped by its destructor
    // The socket of the last run stays behind after kill -9: wait for this
    // run's own.
    std::error_code ec;
    fs::remove(dir_.Join("data/api.sock"), ec);
    server_ = std::make_unique<Subprocess>(
        std::vector<std::string>{BERTH_BINARY, "--data-dir", dir_.Join("data"), "serve", "--api-address", ""},
        dir_.Join(absl::StrCat("server-", ++starts_, ".log")));
    auto probe = http::ApiClient::ForUnixSocket(dir_.Join("data/api.sock"));
    const bool up = Eventually(
        [&] {
          if (server_->Wait(absl::ZeroDuration()).has_value()) return true;
          auto r = probe->Call("GET", absl::StrCat(kSecrets, "?limit=1"));
          return r.ok() && r->code == 200;
        },
        absl::Seconds(30));
    ASSERT_TRUE(up && !server_->Wait(absl::ZeroDuration()).has_value()) << "berth serve did not come up:\n"
                                                                        << server_->Output();
  }

  // Every Secret in default, read page by page.
  std::map<std::string, json> ListAll() {
    std::map<std::string, json> out;
    auto client = http::ApiClient::ForUnixSocket(dir_.Join("data/api.sock"));
    std::string cont;
    do {
      std::string target = absl::StrCat(kSecrets, "?limit=500");
      if (!cont.empty()) target += "&continue=" + cont;
      auto r = client->Call("GET", target);
      if (!r.ok() || r->code != 200) {
        ADD_FAILURE() << "list: " << (r.ok() ? r->body : r.status().ToString());
        return out;
      }
      const json page = json::parse(r->body);
      for (const auto& item : page["items"]) out[item["metadata"]["name"].get<std::string>()] = item;
      cont = page["metadata"].value("continue", "");
    } while (!cont.empty());
    return out;
  }

  // One client: creates r<round>-c<client>-<i>, and after every third create
  // updates one of its acknowledged objects to its next version, until its
  // first failed request (the server was killed) or `stop`.
  void Client(int round, int id, uint64_t seed, const std::atomic<bool>& stop) {
    auto client = http::ApiClient::ForUnixSocket(dir_.Join("data/api.sock"));
    std::mt19937_64 rng(seed);
    std::vector<std::string> mine;  // acknowledged creates
    for (int i = 0; !stop; ++i) {
      std::string name = absl::StrCat("r", round, "-c", id, "-", i);
      int version = 1;
      std::string method = "POST", target = kSecrets;
      if (i % 3 == 2 && !mine.empty()) {
        name = mine[std::uniform_int_distribution<size_t>(0, mine.size() - 1)(rng)];
        std::lock_guard<std::mutex> lock(ledger_.mu);
        version = ledger_.sent[name] + 1;
        method = "PUT";
        target = absl::StrCat(kSecrets, "/", name);
      }
      {
        std::lock_guard<std::mutex> lock(ledger_.mu);
        ledger_.sent[name] = version;
      }
      // An unconditional PUT (no resourceVersion): this client is the only
      // writer of its objects.
      auto r = client->Call(method, target, Object(name, version).dump());
      if (!r.ok()) return;  // killed: this write's outcome is unknown
      ASSERT_EQ(r->code, method == "POST" ? 201 : 200) << method << " " << name << ": " << r->body;
      {
        std::lock_guard<std::mutex> lock(ledger_.mu);
        ledger_.acked[name] = version;
      }
      if (method == "POST") mine.push_back(name);
      ++ledger_.acks;
    }
  }

  // Checks what the restarted server holds against the ledger.
  void Verify(int round) {
    const std::map<std::string, json> stored = ListAll();
    std::lock_guard<std::mutex> lock(ledger_.mu);
    int lost = 0, unacked_present = 0;
    for (const auto& [name, version] : ledger_.acked) {
      auto it = stored.find(name);
      if (it == stored.end()) {
        ADD_FAILURE() << "round " << round << ": acknowledged " << name << " (version " << version << ") is gone";
        ++lost;
        continue;
      }
      int have = 0;
      ASSERT_TRUE(absl::SimpleAtoi(Annotation(it->second, kVersion), &have)) << it->second.dump();
      EXPECT_GE(have, version) << "round " << round << ": " << name << " lost its acknowledged update";
    }
    for (const auto& [name, object] : stored) {
      auto sent = ledger_.sent.find(name);
      ASSERT_NE(sent, ledger_.sent.end()) << "round " << round << ": " << name << " was never written";
      int version = 0;
      ASSERT_TRUE(absl::SimpleAtoi(Annotation(object, kVersion), &version)) << object.dump();
      EXPECT_LE(version, sent->second) << name;
      EXPECT_EQ(Annotation(object, kPayload), Payload(name, version))
          << "round " << round << ": " << name << " version " << version << " is not whole";
      auto acked = ledger_.acked.find(name);
      if (acked == ledger_.acked.end() || acked->second < version) ++unacked_present;
    }
    std::cout << "[ CRASH    ] round " << round << ": " << ledger_.acked.size() << " objects acknowledged, "
              << stored.size() << " stored, " << unacked_present
              << " with a write not acknowledged (committed before the kill), " << lost << " lost\n"
              << std::flush;
  }

  TempDir dir_;
  std::unique_ptr<Subprocess> server_;
  int starts_ = 0;
  Ledger ledger_;
};

TEST_F(StoreCrashTest, KillNineLosesNoAcknowledgedWrite) {
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("BERTH_TEST_SEED"); s != nullptr) {
    ASSERT_TRUE(absl::SimpleAtoi(s, &seed)) << s;
  }
  std::cout << "[ SEED     ] BERTH_TEST_SEED=" << seed << "\n" << std::flush;
  std::mt19937_64 rng(seed);
  for (int round = 1; round <= kRounds; ++round) {
    ASSERT_NO_FATAL_FAILURE(StartServer());
    // Writes acknowledged (in this round) before the kill: at least a few
    // group commits' worth, at most a few hundred.
    const int kill_after = ledger_.acks + std::uniform_int_distribution<int>(20, 600)(rng);
    std::atomic<bool> stop{false};
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([this, round, c, s = rng(), &stop] { Client(round, c, s, stop); });
    }
    const bool reached = Eventually([&] { return ledger_.acks >= kill_after; }, absl::Seconds(120));
    const pid_t pid = server_->pid();
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    EXPECT_EQ(server_->Wait(absl::Seconds(30)), std::optional<int>(128 + SIGKILL));
    stop = true;
    for (auto& t : clients) t.join();
    ASSERT_TRUE(reached) << "only " << ledger_.acks << " writes acknowledged before the deadline";
    std::cout << "[ CRASH    ] round " << round << ": kill -9 after " << ledger_.acks << " acknowledged writes\n";

    ASSERT_NO_FATAL_FAILURE(StartServer());
    ASSERT_NO_FATAL_FAILURE(Verify(round));
    // The restarted server takes writes.
    auto client = http::ApiClient::ForUnixSocket(dir_.Join("data/api.sock"));
    const std::string name = absl::StrCat("r", round, "-after");
    {
      std::lock_guard<std::mutex> lock(ledger_.mu);
      ledger_.sent[name] = 1;
    }
    auto r = client->Call("POST", kSecrets, Object(name, 1).dump());
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->code, 201) << r->body;
    {
      std::lock_guard<std::mutex> lock(ledger_.mu);
      ledger_.acked[name] = 1;
    }
    server_->Signal(SIGTERM);
    ASSERT_EQ(server_->Wait(absl::Seconds(30)), std::optional<int>(0)) << server_->Output();
  }
}

}  // namespace
}  // namespace berth::testing
