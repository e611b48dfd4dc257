// The strict driver over its real socket: each CO violation it must catch,
// the idempotency and conflicts it must get right itself, faults, restarts,
// and (as root) real bind mounts carrying data.
#include "driver/testing/strict_driver.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/testing/temp_dir.h"
#include "csi/client.h"
#include "csi/server.h"
#include "driver/testing/fakes.h"
#include "driver/testing/sandbox.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"

namespace berth::driver::testing {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::csi::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

v1::VolumeCapability MountCap(
    v1::VolumeCapability::AccessMode::Mode mode = v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER) {
  v1::VolumeCapability cap;
  cap.mutable_mount()->set_fs_type("ext4");
  cap.mutable_access_mode()->set_mode(mode);
  return cap;
}
v1::VolumeCapability BlockCap() {
  v1::VolumeCapability cap;
  cap.mutable_block();
  cap.mutable_access_mode()->set_mode(v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  return cap;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs a driver on a socket in a temp dir (or the caller's directory) and
// keeps stubs to it. Node paths live under root().
class Harness {
 public:
  Harness(const std::string& dir, driver::Mounter& mounter, StrictDriver::Options options) : dir_(dir) {
    options.node_id = "node-1";
    options.state_dir = dir + "/state";
    options.violations_file = dir + "/violations";
    auto d = StrictDriver::Open(std::move(options), mounter);
    EXPECT_TRUE(d.ok()) << d.status();
    driver_ = std::move(*d);
    auto s = csi::CsiServer::Start({.endpoint = "unix://" + dir + "/csi.sock"}, driver_->services());
    EXPECT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    auto channel = csi::ConnectUnix("unix://" + dir + "/csi.sock", {});
    EXPECT_TRUE(channel.ok()) << channel.status();
    controller_ = v1::Controller::NewStub(*channel);
    node_ = v1::Node::NewStub(*channel);
    fs::create_directories(root());
  }
  ~Harness() { server_->Shutdown(absl::ZeroDuration()); }

  std::string root() const { return dir_ + "/kubelet"; }
  std::string Staging(const std::string& name = "vol") const { return root() + "/staging/" + name; }
  std::string Target(const std::string& pod = "pod") const { return root() + "/pods/" + pod + "/mount"; }
  StrictDriver& driver() { return *driver_; }
  std::string ViolationsFile() const { return ReadAll(dir_ + "/violations"); }

  grpc::Status CreateVolume(const v1::CreateVolumeRequest& req, v1::CreateVolumeResponse* resp = nullptr) {
    v1::CreateVolumeResponse r;
    grpc::ClientContext ctx;
    return controller_->CreateVolume(&ctx, req, resp ? resp : &r);
  }
  // A mount volume "name" (block with `block`): its ID.
  std::string Create(const std::string& name, bool block = false) {
    v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(64 << 20);
    *req.add_volume_capabilities() = block ? BlockCap() : MountCap();
    v1::CreateVolumeResponse resp;
    grpc::Status st = CreateVolume(req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    context_[resp.volume().volume_id()] = {resp.volume().volume_context().begin(),
                                           resp.volume().volume_context().end()};
    block_[resp.volume().volume_id()] = block;
    return resp.volume().volume_id();
  }
  grpc::Status Attach(const std::string& id, v1::ControllerPublishVolumeResponse* resp = nullptr) {
    v1::ControllerPublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_node_id("node-1");
    *req.mutable_volume_capability() = Cap(id);
    SetContext(id, req.mutable_volume_context());
    v1::ControllerPublishVolumeResponse r;
    grpc::ClientContext ctx;
    grpc::Status st = controller_->ControllerPublishVolume(&ctx, req, resp ? resp : &r);
    if (st.ok())
      publish_context_[id] = {(resp ? resp : &r)->publish_context().begin(),
                              (resp ? resp : &r)->publish_context().end()};
    return st;
  }
  grpc::Status Detach(const std::string& id) {
    v1::ControllerUnpublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_node_id("node-1");
    v1::ControllerUnpublishVolumeResponse resp;
    grpc::ClientContext ctx;
    return controller_->ControllerUnpublishVolume(&ctx, req, &resp);
  }
  grpc::Status Delete(const std::string& id) {
    v1::DeleteVolumeRequest req;
    req.set_volume_id(id);
    v1::DeleteVolumeResponse resp;
    grpc::ClientContext ctx;
    return controller_->DeleteVolume(&ctx, req, &resp);
  }
  v1::NodeStageVolumeRequest StageRequest(const std::string& id, const std::string& path) {
    v1::NodeStageVolumeRequest req;
    req.set_volume_id(id);
    req.set_staging_target_path(path);
    *req.mutable_volume_capability() = Cap(id);
    for (const auto& [k, v] : publish_context_[id]) (*req.mutable_publish_context())[k] = v;
    SetContext(id, req.mutable_volume_context());
    return req;
  }
  grpc::Status Stage(const v1::NodeStageVolumeRequest& req) {
    v1::NodeStageVolumeResponse resp;
    grpc::ClientContext ctx;
    return node_->NodeStageVolume(&ctx, req, &resp);
  }
  grpc::Status Stage(const std::string& id, const std::string& path) { return Stage(StageRequest(id, path)); }
  grpc::Status Unstage(const std::string& id, const std::string& path) {
    v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(id);
    req.set_staging_target_path(path);
    v1::NodeUnstageVolumeResponse resp;
    grpc::ClientContext ctx;
    return node_->NodeUnstageVolume(&ctx, req, &resp);
  }
  v1::NodePublishVolumeRequest PublishRequest(const std::string& id, const std::string& staging,
                                              const std::string& target) {
    v1::NodePublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_staging_target_path(staging);
    req.set_target_path(target);
    *req.mutable_volume_capability() = Cap(id);
    for (const auto& [k, v] : publish_context_[id]) (*req.mutable_publish_context())[k] = v;
    SetContext(id, req.mutable_volume_context());
    return req;
  }
  grpc::Status Publish(const v1::NodePublishVolumeRequest& req) {
    v1::NodePublishVolumeResponse resp;
    grpc::ClientContext ctx;
    return node_->NodePublishVolume(&ctx, req, &resp);
  }
  grpc::Status Publish(const std::string& id, const std::string& staging, const std::string& target) {
    return Publish(PublishRequest(id, staging, target));
  }
  grpc::Status Unpublish(const std::string& id, const std::string& target) {
    v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_target_path(target);
    v1::NodeUnpublishVolumeResponse resp;
    grpc::ClientContext ctx;
    return node_->NodeUnpublishVolume(&ctx, req, &resp);
  }
  grpc::Status Stats(const std::string& id, const std::string& path, const std::string& staging,
                     v1::NodeGetVolumeStatsResponse* resp) {
    v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(id);
    req.set_volume_path(path);
    req.set_staging_target_path(staging);
    grpc::ClientContext ctx;
    return node_->NodeGetVolumeStats(&ctx, req, resp);
  }
  grpc::Status NodeExpand(const std::string& id, const std::string& path, const std::string& staging, int64_t bytes) {
    v1::NodeExpandVolumeRequest req;
    req.set_volume_id(id);
    req.set_volume_path(path);
    req.set_staging_target_path(staging);
    req.mutable_capacity_range()->set_required_bytes(bytes);
    v1::NodeExpandVolumeResponse resp;
    grpc::ClientContext ctx;
    return node_->NodeExpandVolume(&ctx, req, &resp);
  }
  grpc::Status ControllerExpand(const std::string& id, int64_t bytes) {
    v1::ControllerExpandVolumeRequest req;
    req.set_volume_id(id);
    req.mutable_capacity_range()->set_required_bytes(bytes);
    v1::ControllerExpandVolumeResponse resp;
    grpc::ClientContext ctx;
    return controller_->ControllerExpandVolume(&ctx, req, &resp);
  }
  v1::Controller::Stub& controller() { return *controller_; }
  v1::Node::Stub& node() { return *node_; }
  std::map<std::string, std::string>& publish_context(const std::string& id) { return publish_context_[id]; }
  std::map<std::string, std::string>& volume_context(const std::string& id) { return context_[id]; }

 private:
  v1::VolumeCapability Cap(const std::string& id) { return block_[id] ? BlockCap() : MountCap(); }
  void SetContext(const std::string& id, google::protobuf::Map<std::string, std::string>* out) {
    for (const auto& [k, v] : context_[id]) (*out)[k] = v;
  }

  const std::string dir_;
  std::unique_ptr<StrictDriver> driver_;
  std::unique_ptr<csi::CsiServer> server_;
  std::unique_ptr<v1::Controller::Stub> controller_;
  std::unique_ptr<v1::Node::Stub> node_;
  std::map<std::string, std::map<std::string, std::string>> context_, publish_context_;
  std::map<std::string, bool> block_;
};

// Options changed by `edit`.
StrictDriver::Options With(const std::function<void(StrictDriver::Options&)>& edit) {
  StrictDriver::Options o;
  edit(o);
  return o;
}

// A gRPC answer that is a recorded CO violation.
MATCHER_P(IsViolation, code, "") {
  return arg.error_code() == code && absl::StartsWith(arg.error_message(), "CO violation: ");
}
constexpr auto kPrecondition = grpc::StatusCode::FAILED_PRECONDITION;
constexpr auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;

class StrictDriverTest : public ::testing::Test {
 protected:
  Harness& Start(StrictDriver::Options options = {}) {
    h_ = std::make_unique<Harness>(dir_.path(), mounter_, std::move(options));
    return *h_;
  }
  // A volume attached, staged and published as a correct CO does it.
  std::string Ready(Harness& h, const std::string& name = "pvc-1") {
    const std::string id = h.Create(name);
    EXPECT_TRUE(h.Attach(id).ok());
    fs::create_directories(h.Staging());
    EXPECT_TRUE(h.Stage(id, h.Staging()).ok());
    fs::create_directories(fs::path(h.Target()).parent_path());
    EXPECT_TRUE(h.Publish(id, h.Staging(), h.Target()).ok());
    return id;
  }

  berth::testing::TempDir dir_;
  driver::testing::FakeMounter mounter_;
  std::unique_ptr<Harness> h_;
};

TEST_F(StrictDriverTest, CorrectLifecycleTwiceOverHasNoViolations) {
  Harness& h = Start();
  const std::string id = h.Create("pvc-1");
  EXPECT_EQ(h.Create("pvc-1"), id);  // same name, same arguments: the same volume
  ASSERT_TRUE(h.Attach(id).ok());
  const auto context = h.publish_context(id);
  ASSERT_TRUE(h.Attach(id).ok());
  EXPECT_EQ(h.publish_context(id), context);  // a repeated publish answers the same context
  fs::create_directories(h.Staging());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(h.Stage(id, h.Staging()).ok());
  fs::create_directories(fs::path(h.Target()).parent_path());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(h.Publish(id, h.Staging(), h.Target()).ok());
  EXPECT_TRUE(fs::is_directory(h.Target()));  // the SP creates the target
  v1::NodeGetVolumeStatsResponse stats;
  ASSERT_TRUE(h.Stats(id, h.Target(), h.Staging(), &stats).ok());
  EXPECT_EQ(stats.usage(0).total(), 64 << 20);
  ASSERT_TRUE(h.ControllerExpand(id, 128 << 20).ok());
  ASSERT_TRUE(h.NodeExpand(id, h.Target(), h.Staging(), 128 << 20).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(h.Unpublish(id, h.Target()).ok());
  EXPECT_FALSE(fs::exists(h.Target()));  // ... and deletes it
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(h.Unstage(id, h.Staging()).ok());
  EXPECT_TRUE(fs::is_directory(h.Staging()));  // the staging directory is the CO's
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(h.Detach(id).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(h.Delete(id).ok());
  EXPECT_THAT(h.driver().Volumes(), IsEmpty());
  EXPECT_THAT(h.driver().Violations(), IsEmpty());
  EXPECT_EQ(h.ViolationsFile(), "");
  EXPECT_THAT(mounter_.List().value(), IsEmpty());
}

TEST_F(StrictDriverTest, StagingDirectoryTheCoDidNotCreate) {
  Harness& h = Start();
  const std::string id = h.Create("pvc-1");
  ASSERT_TRUE(h.Attach(id).ok());
  fs::create_directories(fs::path(h.Staging()).parent_path());  // the parent only, as berth once did
  EXPECT_THAT(h.Stage(id, h.Staging()), IsViolation(kPrecondition));
  std::ofstream(h.Staging()) << "not a directory";
  EXPECT_THAT(h.Stage(id, h.Staging()), IsViolation(kPrecondition));
  EXPECT_THAT(h.driver().Violations(),
              ElementsAre(HasSubstr("does not exist (the CO SHALL create"), HasSubstr("is not a directory")));
  // One line per violation in the file.
  const std::string file = h.ViolationsFile();
  EXPECT_EQ(std::count(file.begin(), file.end(), '\n'), 2) << file;
}

TEST_F(StrictDriverTest, TargetParentMissingOrTargetCreatedByTheCo) {
  Harness& h = Start();
  const std::string id = h.Create("pvc-1");
  ASSERT_TRUE(h.Attach(id).ok());
  fs::create_directories(h.Staging());
  ASSERT_TRUE(h.Stage(id, h.Staging()).ok());
  EXPECT_THAT(h.Publish(id, h.Staging(), h.Target()), IsViolation(kPrecondition));
  fs::create_directories(h.Target());  // the CO made the target itself
  EXPECT_THAT(h.Publish(id, h.Staging(), h.Target()), IsViolation(kPrecondition));
  EXPECT_THAT(h.driver().Violations(),
              ElementsAre(HasSubstr("parent directory of target_path"), HasSubstr("exists before NodePublishVolume")));
}

TEST_F(StrictDriverTest, PublishBeforeStageOrWithAnotherStagingPath) {
  Harness& h = Start();
  const std::string id = h.Create("pvc-1");
  ASSERT_TRUE(h.Attach(id).ok());
  fs::create_directories(fs::path(h.Target()).parent_path());
  EXPECT_THAT(h.Publish(id, h.Staging(), h.Target()), IsViolation(kPrecondition));
  EXPECT_THAT(h.Publish(id, "", h.Target()), IsViolation(kPrecondition));
  fs::create_directories(h.Staging());
  fs::create_directories(h.Staging("other"));
  ASSERT_TRUE(h.Stage(id, h.Staging()).ok());
  EXPECT_THAT(h.Publish(id, h.Staging("other"), h.Target()), IsViolation(kPrecondition));
  EXPECT_THAT(h.Stage(id, h.Staging("other")), IsViolation(kPrecondition));  // one staging path per volume
  EXPECT_THAT(h.driver().Violations(),
              ElementsAre(HasSubstr("before NodeStageVolume succeeded"), HasSubstr("staging_target_path is not set"),
                          HasSubstr("differs from"), HasSubstr("one staging_target_path per volume")));
  EXPECT_FALSE(fs::exists(h.Target()));
}

TEST_F(StrictDriverTest, UnstageWhilePublished) {
  Harness& h = Start();
  const std::string id = Ready(h);
  EXPECT_THAT(h.Unstage(id, h.Staging()), IsViolation(kPrecondition));
  EXPECT_THAT(h.driver().Volumes()[0].staged_at, h.Staging());  // nothing was undone
  ASSERT_TRUE(h.Unpublish(id, h.Target()).ok());
  EXPECT_THAT(h.Unstage(id, h.Staging("elsewhere")), IsViolation(kPrecondition));
  EXPECT_TRUE(h.Unstage(id, h.Staging()).ok());
  EXPECT_THAT(h.driver().Violations(),
              ElementsAre(HasSubstr("still published at"), HasSubstr("but the volume is staged at")));
}

TEST_F(StrictDriverTest, PublishContextMustBeWhatControllerPublishReturned) {
  Harness& h = Start();
  const std::string id = h.Create("pvc-1");
  fs::create_directories(h.Staging());
  EXPECT_THAT(h.Stage(id, h.Staging()), IsViolation(kPrecondition));  // no ControllerPublish yet
  ASSERT_TRUE(h.Attach(id).ok());
  auto req = h.StageRequest(id, h.Staging());
  req.mutable_publish_context()->clear();  // the CO dropped it
  EXPECT_THAT(h.Stage(req), IsViolation(kPrecondition));
  ASSERT_TRUE(h.Stage(id, h.Staging()).ok());
  fs::create_directories(fs::path(h.Target()).parent_path());
  auto pub = h.PublishRequest(id, h.Staging(), h.Target());
  (*pub.mutable_publish_context())["strict.csi.berth.io/attachment"] = "stale";
  EXPECT_THAT(h.Publish(pub), IsViolation(kPrecondition));
  EXPECT_THAT(h.driver().Violations(), ElementsAre(HasSubstr("before ControllerPublishVolume to node node-1 succeeded"),
                                                   HasSubstr("differs from"), HasSubstr("differs from")));
}

TEST_F(StrictDriverTest, PublishContextWithoutPublishUnpublishCapability) {
  Harness& h = Start(With([](auto& o) { o.publish_unpublish = false; }));
  const std::string id = h.Create("pvc-1");
  EXPECT_THAT(h.Attach(id), IsViolation(kPrecondition));  // not advertised
  fs::create_directories(h.Staging());
  auto req = h.StageRequest(id, h.Staging());
  (*req.mutable_publish_context())["device"] = "/dev/x";
  EXPECT_THAT(h.Stage(req), IsViolation(kPrecondition));
  EXPECT_TRUE(h.Stage(id, h.Staging()).ok());  // unset: fine without attach
  EXPECT_THAT(h.driver().Violations(),
              ElementsAre(HasSubstr("does not advertise the controller capability PUBLISH_UNPUBLISH_VOLUME"),
                          HasSubstr("SHALL be left unset")));
}

TEST_F(StrictDriverTest, DetachOrDeleteWhileInUseOnTheNode) {
  Harness& h = Start();
  const std::string id = Ready(h);
  EXPECT_THAT(h.Detach(id), IsViolation(kPrecondition));
  EXPECT_THAT(h.Delete(id), IsViolation(kPrecondition));
  ASSERT_TRUE(h.Unpublish(id, h.Target()).ok());
  EXPECT_THAT(h.Detach(id), IsViolation(kPrecondition));  // still staged
  ASSERT_TRUE(h.Unstage(id, h.Staging()).ok());
  EXPECT_THAT(h.Delete(id), IsViolation(kPrecondition));  // still attached
  ASSERT_TRUE(h.Detach(id).ok());
  ASSERT_TRUE(h.Delete(id).ok());
  EXPECT_THAT(h.driver().Violations(),
              ElementsAre(HasSubstr("ControllerUnpublishVolume from node node-1 while the volume is published"),
                          HasSubstr("DeleteVolume while the volume is ControllerPublished"),
                          HasSubstr("ControllerUnpublishVolume from node node-1 while the volume is staged"),
                          HasSubstr("DeleteVolume while the volume is ControllerPublished")));
}

TEST_F(StrictDriverTest, CallsOfCapabilitiesNotAdvertised) {
  Harness& h = Start(With([](auto& o) {
    o.stage_unstage = false;
    o.volume_stats = false;
    o.expand = false;
    o.node_expand = false;
  }));
  const std::string id = h.Create("pvc-1");
  ASSERT_TRUE(h.Attach(id).ok());
  fs::create_directories(h.Staging());
  EXPECT_THAT(h.Stage(id, h.Staging()), IsViolation(kPrecondition));
  fs::create_directories(fs::path(h.Target()).parent_path());
  ASSERT_TRUE(h.Publish(id, "", h.Target()).ok());  // straight from the volume
  v1::NodeGetVolumeStatsResponse stats;
  EXPECT_THAT(h.Stats(id, h.Target(), "", &stats), IsViolation(kPrecondition));
  EXPECT_THAT(h.ControllerExpand(id, 1 << 30), IsViolation(kPrecondition));
  EXPECT_THAT(h.NodeExpand(id, h.Target(), "", 1 << 30), IsViolation(kPrecondition));
  EXPECT_THAT(h.Unstage(id, h.Staging()), IsViolation(kPrecondition));
  v1::CreateSnapshotRequest snap;
  v1::CreateSnapshotResponse snap_resp;
  grpc::ClientContext ctx;
  EXPECT_THAT(h.controller().CreateSnapshot(&ctx, snap, &snap_resp), IsViolation(kPrecondition));
  EXPECT_THAT(h.driver().Violations(),
              ElementsAre(HasSubstr("STAGE_UNSTAGE_VOLUME"), HasSubstr("GET_VOLUME_STATS"),
                          HasSubstr("controller capability EXPAND_VOLUME"), HasSubstr("node capability EXPAND_VOLUME"),
                          HasSubstr("STAGE_UNSTAGE_VOLUME"), HasSubstr("CREATE_DELETE_SNAPSHOT")));
}

TEST_F(StrictDriverTest, MissingRequiredFields) {
  Harness& h = Start();
  const std::string id = h.Create("pvc-1");
  v1::ControllerPublishVolumeRequest attach;
  attach.set_volume_id(id);
  attach.set_node_id("node-1");
  v1::ControllerPublishVolumeResponse attach_resp;
  grpc::ClientContext ctx;
  EXPECT_THAT(h.controller().ControllerPublishVolume(&ctx, attach, &attach_resp), IsViolation(kInvalid));
  ASSERT_TRUE(h.Attach(id).ok());
  fs::create_directories(h.Staging());
  auto stage = h.StageRequest(id, h.Staging());
  stage.clear_volume_capability();
  EXPECT_THAT(h.Stage(stage), IsViolation(kInvalid));
  EXPECT_THAT(h.Stage(id, ""), IsViolation(kInvalid));
  ASSERT_TRUE(h.Stage(id, h.Staging()).ok());
  fs::create_directories(fs::path(h.Target()).parent_path());
  auto publish = h.PublishRequest(id, h.Staging(), h.Target());
  publish.mutable_volume_capability()->clear_access_mode();
  EXPECT_THAT(h.Publish(publish), IsViolation(kInvalid));
  v1::CreateVolumeRequest create;
  create.set_name("pvc-2");
  EXPECT_THAT(h.CreateVolume(create), IsViolation(kInvalid));
  EXPECT_THAT(h.driver().Violations(),
              ElementsAre(HasSubstr("volume_capability is not set"), HasSubstr("volume_capability is not set"),
                          HasSubstr("staging_target_path is not set"), HasSubstr("no access_mode"),
                          HasSubstr("volume_capabilities is empty")));
}

TEST_F(StrictDriverTest, TwoCallsInFlightOnOneVolume) {
  absl::Notification held, release;
  StrictDriver::Options options;
  options.in_flight_hook = [&](std::string_view rpc) {
    if (rpc == "NodeStageVolume" && !held.HasBeenNotified()) {
      held.Notify();
      release.WaitForNotification();
    }
  };
  Harness& h = Start(options);
  const std::string id = h.Create("pvc-1");
  ASSERT_TRUE(h.Attach(id).ok());
  fs::create_directories(h.Staging());
  grpc::Status first;
  std::thread stage([&] { first = h.Stage(id, h.Staging()); });
  held.WaitForNotification();
  EXPECT_THAT(h.Unstage(id, h.Staging()), IsViolation(grpc::StatusCode::ABORTED));
  // Stats may overlap (kubelet gathers them beside its operations).
  v1::NodeGetVolumeStatsResponse stats;
  EXPECT_EQ(h.Stats(id, h.Staging(), h.Staging(), &stats).error_code(), grpc::StatusCode::NOT_FOUND);
  release.Notify();
  stage.join();
  EXPECT_TRUE(first.ok()) << first.error_message();
  EXPECT_THAT(h.driver().Violations(),
              ElementsAre(HasSubstr("NodeUnstageVolume while NodeStageVolume is in flight on the same volume")));
  EXPECT_TRUE(h.Unstage(id, h.Staging()).ok());  // in turn: fine
}

TEST_F(StrictDriverTest, OwnIdempotencyAndConflicts) {
  Harness& h = Start();
  const std::string id = Ready(h);
  v1::CreateVolumeRequest bigger;
  bigger.set_name("pvc-1");
  bigger.mutable_capacity_range()->set_required_bytes(1 << 30);
  *bigger.add_volume_capabilities() = MountCap();
  EXPECT_EQ(h.CreateVolume(bigger).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  auto stage = h.StageRequest(id, h.Staging());
  stage.mutable_volume_capability()->mutable_mount()->set_fs_type("xfs");
  EXPECT_EQ(h.Stage(stage).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  auto publish = h.PublishRequest(id, h.Staging(), h.Target());
  publish.set_readonly(true);
  EXPECT_EQ(h.Publish(publish).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  // A second target of a SINGLE_NODE_WRITER volume: the spec's table.
  fs::create_directories(fs::path(h.Target("pod-2")).parent_path());
  EXPECT_EQ(h.Publish(id, h.Staging(), h.Target("pod-2")).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(fs::exists(h.Target("pod-2")));
  EXPECT_EQ(h.Delete("vol-nonsense").error_code(), grpc::StatusCode::OK);  // unknown: already gone
  EXPECT_EQ(h.Unpublish("vol-0123456789abcdef0123456789abcdef", h.Target()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(h.driver().Violations(), IsEmpty());
}

TEST_F(StrictDriverTest, TimeoutAfterARealStageLeavesItUnconfirmed) {
  Harness& h = Start(With([](auto& o) { o.faults = {*ParseStrictFault("stage:DEADLINE_EXCEEDED:1:after")}; }));
  const std::string id = h.Create("pvc-1");
  ASSERT_TRUE(h.Attach(id).ok());
  fs::create_directories(h.Staging());
  EXPECT_EQ(h.Stage(id, h.Staging()).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(h.driver().Volumes()[0].staged_at, h.Staging());  // the work happened
  EXPECT_THAT(mounter_.List().value(), SizeIs(1));
  fs::create_directories(fs::path(h.Target()).parent_path());
  // Publishing on an uncertain stage breaks "NodeStageVolume returns success first".
  EXPECT_THAT(h.Publish(id, h.Staging(), h.Target()), IsViolation(kPrecondition));
  ASSERT_TRUE(h.Stage(id, h.Staging()).ok());       // the CO's retry: done already, confirmed
  EXPECT_THAT(mounter_.List().value(), SizeIs(1));  // not mounted twice
  EXPECT_TRUE(h.Publish(id, h.Staging(), h.Target()).ok());
  EXPECT_THAT(h.driver().Violations(), ElementsAre(HasSubstr("did not return success")));
  EXPECT_EQ(h.driver().Calls("NodeStageVolume", absl::StatusCode::kDeadlineExceeded), 1);
  EXPECT_EQ(h.driver().Calls("NodeStageVolume", absl::StatusCode::kOk), 1);
}

TEST_F(StrictDriverTest, FaultBeforeDoesNothing) {
  Harness& h = Start(With([](auto& o) { o.faults = {*ParseStrictFault("stage:UNAVAILABLE:2")}; }));
  const std::string id = h.Create("pvc-1");
  ASSERT_TRUE(h.Attach(id).ok());
  fs::create_directories(h.Staging());
  EXPECT_EQ(h.Stage(id, h.Staging()).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(h.Stage(id, h.Staging()).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(h.driver().Volumes()[0].staged_at, "");
  EXPECT_THAT(mounter_.List().value(), IsEmpty());
  EXPECT_TRUE(h.Stage(id, h.Staging()).ok());
}

TEST_F(StrictDriverTest, StateSurvivesARestart) {
  std::string id;
  std::map<std::string, std::string> context, volume_context;
  {
    Harness& h = Start();
    id = Ready(h);
    context = h.publish_context(id);
    volume_context = h.volume_context(id);
    h_.reset();
  }
  Harness& h = Start();
  h.volume_context(id) = volume_context;
  ASSERT_THAT(h.driver().Volumes(), SizeIs(1));
  EXPECT_EQ(h.driver().Volumes()[0].staged_at, h.Staging());
  EXPECT_THAT(h.Detach(id), IsViolation(kPrecondition));  // still remembers the publish
  h.publish_context(id) = context;
  EXPECT_TRUE(h.Publish(id, h.Staging(), h.Target()).ok());  // idempotent across the restart
  EXPECT_TRUE(h.Unpublish(id, h.Target()).ok());
  EXPECT_TRUE(h.Unstage(id, h.Staging()).ok());
  EXPECT_TRUE(h.Detach(id).ok());
  EXPECT_TRUE(h.Delete(id).ok());
}

TEST_F(StrictDriverTest, VolumeContextMustMatchCreateVolume) {
  Harness& h = Start();
  const std::string id = h.Create("pvc-1");
  ASSERT_TRUE(h.Attach(id).ok());
  fs::create_directories(h.Staging());
  auto req = h.StageRequest(id, h.Staging());
  (*req.mutable_volume_context())["invented"] = "1";
  EXPECT_THAT(h.Stage(req), IsViolation(kPrecondition));
  req = h.StageRequest(id, h.Staging());
  (*req.mutable_volume_context())["csi.storage.k8s.io/pod.name"] = "app";  // Kubernetes' own keys are fine
  (*req.mutable_volume_context())["storage.kubernetes.io/csiProvisionerIdentity"] = "x";
  EXPECT_TRUE(h.Stage(req).ok());
  EXPECT_THAT(h.driver().Violations(), ElementsAre(HasSubstr("\"invented\" was not returned by CreateVolume")));
}

TEST_F(StrictDriverTest, NodeExpandBeyondTheControllersSize) {
  Harness& h = Start();
  const std::string id = Ready(h);
  EXPECT_THAT(h.NodeExpand(id, h.Target(), h.Staging(), 256 << 20), IsViolation(kPrecondition));
  ASSERT_TRUE(h.ControllerExpand(id, 256 << 20).ok());
  EXPECT_TRUE(h.NodeExpand(id, h.Target(), h.Staging(), 256 << 20).ok());
  EXPECT_THAT(h.driver().Violations(), ElementsAre(HasSubstr("the controller expands first")));
}

TEST(StrictFaultTest, Parses) {
  auto f = ParseStrictFault("stage:DEADLINE_EXCEEDED:1:after");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->op, StrictOp::kStage);
  EXPECT_EQ(f->code, absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(f->count, 1);
  EXPECT_TRUE(f->after);
  f = ParseStrictFault("controller-unpublish:UNAVAILABLE");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->op, StrictOp::kControllerUnpublish);
  EXPECT_FALSE(f->after);
  for (const char* bad : {"stage", "mount:UNAVAILABLE", "stage:SLOW", "stage:UNAVAILABLE:0",
                          "stage:UNAVAILABLE:1:later", "stage:UNAVAILABLE:1:after:x"}) {
    EXPECT_EQ(ParseStrictFault(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// As root: real bind mounts, data through the target into the volume,
// nothing mounted at the end.
TEST(StrictDriverMountTest, RealMountsCarryData) {
  BERTH_REQUIRE_ROOT();
  berth::testing::MountSandbox sandbox;
  driver::LinuxMounter mounter;
  {
    Harness h(sandbox.path(), mounter, {});
    for (bool block : {false, true}) {
      const std::string name = block ? "block" : "fs";
      const std::string id = h.Create(name, block);
      ASSERT_TRUE(h.Attach(id).ok());
      fs::create_directories(h.Staging(name));
      ASSERT_TRUE(h.Stage(id, h.Staging(name)).ok());
      fs::create_directories(fs::path(h.Target(name)).parent_path());
      ASSERT_TRUE(h.Publish(id, h.Staging(name), h.Target(name)).ok());
      std::string backing;
      for (const auto& v : h.driver().Volumes()) {
        if (v.name == name) backing = v.path;
      }
      if (block) {
        std::fstream(h.Target(name), std::ios::in | std::ios::out | std::ios::binary) << "through the device";
      } else {
        std::ofstream(h.Target(name) + "/hello") << "through the mount";
      }
      char head[17] = {};
      std::ifstream(block ? backing : backing + "/hello", std::ios::binary).read(head, sizeof(head));
      EXPECT_EQ(std::string(head, sizeof(head)), block ? "through the devic" : "through the mount");
      ASSERT_TRUE(h.Unpublish(id, h.Target(name)).ok());
      ASSERT_TRUE(h.Unstage(id, h.Staging(name)).ok());
      EXPECT_FALSE(fs::exists(h.Target(name)));
      ASSERT_TRUE(h.Detach(id).ok());
      ASSERT_TRUE(h.Delete(id).ok());
      EXPECT_FALSE(fs::exists(backing));
    }
    EXPECT_THAT(h.driver().Violations(), IsEmpty());
  }
  EXPECT_THAT(sandbox.Mounts(), IsEmpty());
}

}  // namespace
}  // namespace berth::driver::testing
