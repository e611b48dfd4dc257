// The Schedule controller against a real registry and informer, on a fake
// clock: backups at each due time with the template's spec and the
// schedule's label, lastBackup, pause, one catch-up backup for runs missed
// while berth was down, no second backup after a crash between the create
// and the status write, FailedValidation.
#include "controllers/backup/schedule_controller.h"

#include <memory>
#include <string>
#include <vector>

#include "api/types/backup.h"
#include "client/object.h"
#include "client/testing/settle.h"
#include "client/writes.h"
#include "common/testing/eventually.h"
#include "controllers/testing/controller_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {
namespace {

using client::Informer;
using client::K;
using client::Str;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kGroup[] = "backup.berth.io";

class ScheduleControllerTest : public controllers::testing::ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    if (HasFatalFailure()) return;
    schedules_ = std::make_unique<Informer>(*registry_, K("schedules", kGroup));
    controller_ =
        std::make_unique<ScheduleController>(*registry_, *schedules_, ScheduleController::Options{.clock = &clock_});
    controller_->RegisterHandlers();
    schedules_->Start();
    ASSERT_TRUE(schedules_->WaitForSync(absl::Seconds(10)));
  }
  void TearDown() override {
    if (controller_) controller_->Stop();
    if (schedules_) schedules_->Stop();
  }

  json Schedule(const std::string& name, const std::string& cron, bool paused = false) {
    return Create("schedules", kGroup, "",
                  {{"metadata", {{"name", name}}},
                   {"spec",
                    {{"schedule", cron},
                     {"paused", paused},
                     {"template", {{"includedNamespaces", {"shop"}}, {"ttl", "24h0m0s"}}}}}});
  }
  // The backups that exist, by name.
  std::vector<std::string> BackupNames() {
    auto list = registry_->List(K("backups", kGroup), "", {});
    EXPECT_TRUE(list.ok()) << list.status();
    std::vector<std::string> out;
    for (const auto& b : list->items) out.push_back(client::Name(b));
    return out;
  }
  std::string BackupName(const std::string& schedule, absl::Time t) {
    return schedule + "-" + absl::FormatTime("%Y%m%d%H%M%S", t, absl::UTCTimeZone());
  }
  json Status(const std::string& name) { return Get("schedules", kGroup, "", name).value("status", json::object()); }
  void Settled() { ASSERT_TRUE(berth::testing::Settle(*store_)); }
  // Sets status.lastBackup as a controller before a stop would have, and
  // waits until the informer has it.
  void SetLastBackup(const std::string& name, absl::Time t) {
    PatchStatus("schedules", kGroup, "", name, {{"lastBackup", client::Rfc3339(t)}});
    ASSERT_TRUE(berth::testing::Eventually([&] {
      auto cached = schedules_->Get("", name);
      return cached && Str(*cached, {"status", "lastBackup"}) == client::Rfc3339(t);
    }));
  }

  // Real time, as the store stamps creationTimestamp with it.
  FakeClock clock_{absl::Now()};
  std::unique_ptr<Informer> schedules_;
  std::unique_ptr<ScheduleController> controller_;
};

TEST_F(ScheduleControllerTest, MakesABackupEachTimeItIsDue) {
  controller_->Start();
  json created = Schedule("nightly", "@every 1h");
  Settled();
  EXPECT_EQ(Status("nightly")["phase"], "Enabled");
  EXPECT_THAT(BackupNames(), IsEmpty());  // not at creation: at the first due time

  // An hour after its creation. (Advanced to the due time exactly: the
  // clock reads the same whether the worker looks during Advance or after.)
  absl::Time first;
  std::string err;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, Str(created, {"metadata", "creationTimestamp"}), &first, &err));
  first += absl::Hours(1);
  clock_.Advance(first - absl::Seconds(1) - clock_.Now());
  Settled();
  EXPECT_THAT(BackupNames(), IsEmpty());
  clock_.Advance(absl::Seconds(1));
  Settled();
  ASSERT_THAT(BackupNames(), ElementsAre(BackupName("nightly", first)));
  json backup = Get("backups", kGroup, "", BackupName("nightly", first));
  EXPECT_EQ(backup["metadata"]["labels"], json({{"backup.berth.io/schedule-name", "nightly"}}));
  EXPECT_FALSE(backup["metadata"].contains("ownerReferences"));  // the schedule's deletion keeps its backups
  EXPECT_EQ(backup["spec"], json({{"includedNamespaces", {"shop"}}, {"ttl", "24h0m0s"}}));
  EXPECT_EQ(Status("nightly")["lastBackup"], client::Rfc3339(first));

  // Nothing more until the next hour has passed.
  clock_.Advance(absl::Minutes(59));
  Settled();
  EXPECT_EQ(BackupNames().size(), 1u);
  clock_.Advance(absl::Minutes(1));
  Settled();
  EXPECT_THAT(BackupNames(), ElementsAre(BackupName("nightly", first), BackupName("nightly", first + absl::Hours(1))));
  EXPECT_EQ(Status("nightly")["lastBackup"], client::Rfc3339(first + absl::Hours(1)));
}

TEST_F(ScheduleControllerTest, RunsMissedWhileDownAreCaughtUpOnceAtStart) {
  Schedule("hourly", "@hourly");
  // Its last backup five hours ago: four or five runs were missed.
  const absl::Time now = absl::FromUnixSeconds(absl::ToUnixSeconds(clock_.Now()));
  SetLastBackup("hourly", now - absl::Hours(5));
  controller_->Start();
  Settled();
  ASSERT_THAT(BackupNames(), ElementsAre(BackupName("hourly", now)));
  EXPECT_EQ(Status("hourly")["lastBackup"], client::Rfc3339(now));

  // Then the next whole hour, as the expression says.
  const absl::CivilHour hour = absl::CivilHour(absl::ToCivilSecond(now, absl::UTCTimeZone()));
  const absl::Time next = absl::FromCivil(hour + 1, absl::UTCTimeZone());
  clock_.Advance(next - clock_.Now() - absl::Seconds(1));
  Settled();
  EXPECT_EQ(BackupNames().size(), 1u);
  clock_.Advance(absl::Seconds(1));
  Settled();
  EXPECT_THAT(BackupNames(), ElementsAre(BackupName("hourly", now), BackupName("hourly", next)));
}

TEST_F(ScheduleControllerTest, APausedScheduleMakesNoneUntilResumed) {
  Schedule("paused", "@every 1h", /*paused=*/true);
  const absl::Time now = absl::FromUnixSeconds(absl::ToUnixSeconds(clock_.Now()));
  SetLastBackup("paused", now - absl::Hours(3));
  controller_->Start();
  Settled();
  EXPECT_EQ(Status("paused")["phase"], "Enabled");
  clock_.Advance(absl::Hours(2));
  Settled();
  EXPECT_THAT(BackupNames(), IsEmpty());

  json resumed = Get("schedules", kGroup, "", "paused");
  resumed["spec"]["paused"] = false;
  ASSERT_TRUE(registry_->Update(K("schedules", kGroup), "", "paused", resumed, apiserver::Subresource::kMain).ok());
  Settled();
  EXPECT_THAT(BackupNames(), ElementsAre(BackupName("paused", now + absl::Hours(2))));
}

TEST_F(ScheduleControllerTest, ABackupMadeBeforeACrashIsRecordedNotMadeAgain) {
  Schedule("nightly", "@every 1h");
  const absl::Time now = absl::FromUnixSeconds(absl::ToUnixSeconds(clock_.Now()));
  SetLastBackup("nightly", now - absl::Hours(2));
  // The backup of the run due an hour ago, created (just now, by the real
  // clock) before the process stopped short of writing lastBackup.
  json made = Create(
      "backups", kGroup, "",
      {{"metadata", {{"name", "nightly-made-before"}, {"labels", {{"backup.berth.io/schedule-name", "nightly"}}}}},
       {"spec", json::object()}});
  ASSERT_TRUE(controller_->SyncSchedule("nightly").ok());
  EXPECT_THAT(BackupNames(), ElementsAre("nightly-made-before"));
  EXPECT_EQ(Status("nightly")["lastBackup"], made["metadata"]["creationTimestamp"]);
  // Another schedule's backup is no excuse.
  Schedule("other", "@every 1h");
  SetLastBackup("other", now - absl::Hours(2));
  ASSERT_TRUE(controller_->SyncSchedule("other").ok());
  EXPECT_EQ(BackupNames().size(), 2u);
}

TEST_F(ScheduleControllerTest, AnInvalidTemplateFailsValidationAndMakesNothing) {
  controller_->Start();
  Create("schedules", kGroup, "",
         {{"metadata", {{"name", "bad"}}},
          {"spec",
           {{"schedule", "*/5 * * * *"},
            {"template", {{"includedNamespaces", {"shop", "db"}}, {"excludedNamespaces", {"db"}}}}}}});
  Settled();
  EXPECT_EQ(Status("bad"),
            json({{"phase", "FailedValidation"},
                  {"validationErrors", {"invalid template: namespace db is both included and excluded"}}}));
  clock_.Advance(absl::Minutes(10));
  Settled();
  EXPECT_THAT(BackupNames(), IsEmpty());

  // Fixed: Enabled, the errors gone, and the run missed meanwhile made
  // once, as one missed while berth was down.
  json fixed = Get("schedules", kGroup, "", "bad");
  fixed["spec"]["template"]["excludedNamespaces"] = json::array();
  ASSERT_TRUE(registry_->Update(K("schedules", kGroup), "", "bad", fixed, apiserver::Subresource::kMain).ok());
  Settled();
  EXPECT_EQ(Status("bad")["phase"], "Enabled");
  EXPECT_FALSE(Status("bad").contains("validationErrors"));
  EXPECT_THAT(BackupNames(), ElementsAre(BackupName("bad", clock_.Now())));
}

}  // namespace
}  // namespace berth::controllers
