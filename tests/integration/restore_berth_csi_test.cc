// A restored claim filled from a backup repository by the real berth-csi (a
// process on a sandboxed XFS pool, as root): the provisioner's volume
// populator hook with BackupPopulator and the data mover — an empty block
// volume staged and published on the node, the backup written into it, the
// claim's volume cloned from it — and the PV only once the bytes are in.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>

#include "backup/repository.h"
#include "client/informer.h"
#include "client/object.h"
#include "common/fd.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "controllers/backup/backup_populator.h"
#include "controllers/backup/data_mover.h"
#include "controllers/backup/restore_controller.h"
#include "controllers/manager.h"
#include "controllers/volume/provisioner.h"
#include "controllers/volume/pv_binder.h"
#include "driver_process.h"
#include "gmock/gmock.h"
#include "store/store.h"

namespace berth::testing {
namespace {

using client::Str;
using nlohmann::json;

constexpr char kDriver[] = "local.csi.berth.io";
constexpr char kNode[] = "node-a";
constexpr char kGroup[] = "backup.berth.io";
constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kVolumeBytes = 8 * kMiB;
constexpr char kText[] = "written before the node was lost\n";

const api::KindInfo& K(std::string_view resource, std::string_view group = "") {
  return *api::FindResource(group, resource);
}

// BackupPopulator, and whether any PV of the claim existed when its volume
// had been filled (it must not: the claim binds only once the data is in).
class WatchedPopulator : public controllers::VolumePopulator {
 public:
  WatchedPopulator(controllers::VolumePopulator& real, apiserver::Registry& registry)
      : real_(real), registry_(registry) {}
  bool Serves(const controllers::DataSourceRef& ref) const override { return real_.Serves(ref); }
  absl::Status Check(const controllers::PopulationRequest& r) override { return real_.Check(r); }
  std::map<std::string, std::string> Parameters() const override { return real_.Parameters(); }
  absl::Status Release(const controllers::PopulationRequest& r) override {
    ++releases;
    return real_.Release(r);
  }
  absl::StatusOr<::csi::v1::VolumeContentSource> Populate(const controllers::PopulationRequest& r) override {
    auto out = real_.Populate(r);
    if (out.ok()) {
      ++filled;
      auto pv = registry_.Get(K("persistentvolumes"), "", "pvc-" + r.claim.metadata.uid);
      if (pv.ok() || !absl::IsNotFound(pv.status())) pv_before_filled = true;
    }
    return out;
  }
  std::atomic<int> filled{0};
  std::atomic<int> releases{0};
  std::atomic<bool> pv_before_filled{false};

 private:
  controllers::VolumePopulator& real_;
  apiserver::Registry& registry_;
};

class RestoreBerthCsiTest : public DriverProcessTest {
 protected:
  void SetUp() override {
    DriverProcessTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    store_ = std::move(*store::Store::Open({.path = dir_.path() + "/state.db"}));
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    registry_->EnableStorageProtectionAdmission(true);
    ASSERT_TRUE(registry_->Bootstrap().ok());
    directory_.Add(kDriver, kNode, "unix://" + driver_->socket());
    // What the node agent does at plugin registration.
    ::csi::v1::NodeGetInfoResponse info;
    ASSERT_TRUE(driver_->node().NodeGetInfo(Ctx().get(), {}, &info).ok());
    json labels = {{"kubernetes.io/hostname", kNode}};
    json keys = json::array();
    for (const auto& [k, v] : info.accessible_topology().segments()) {
      labels[k] = v;
      keys.push_back(k);
    }
    Create("nodes", "", "", {{"metadata", {{"name", kNode}, {"labels", labels}}}});
    Create("csinodes", "storage.k8s.io", "",
           {{"metadata", {{"name", kNode}}},
            {"spec", {{"drivers", {{{"name", kDriver}, {"nodeID", info.node_id()}, {"topologyKeys", keys}}}}}}});
    Create("storageclasses", "storage.k8s.io", "",
           {{"metadata", {{"name", "local"}}},
            {"provisioner", kDriver},
            {"volumeBindingMode", "WaitForFirstConsumer"},
            {"reclaimPolicy", "Delete"}});
    // The repository, a backup of one volume with known content, and the
    // objects that name it.
    repo_path_ = sandbox_.Join("repo");
    auto repo = backup::Repository::Create(repo_path_);
    ASSERT_TRUE(repo.ok()) << repo.status();
    repo_ = std::move(*repo);
    Create("backupstoragelocations", kGroup, "",
           {{"metadata", {{"name", "default"}}},
            {"spec", {{"provider", "filesystem"}, {"config", {{"path", repo_path_}}}, {"default", true}}}});
    if (own_controllers_) StartControllers();
  }
  void TearDown() override {
    manager_.reset();  // before the directory and the registry it uses
    StopControllers();
    DriverProcessTest::TearDown();
  }

  void StartControllers() {
    for (auto [resource, group] : std::vector<std::pair<const char*, const char*>>{{"persistentvolumeclaims", ""},
                                                                                   {"persistentvolumes", ""},
                                                                                   {"storageclasses", "storage.k8s.io"},
                                                                                   {"pods", ""},
                                                                                   {"nodes", ""},
                                                                                   {"csinodes", "storage.k8s.io"}}) {
      informers_[resource] = std::make_unique<client::Informer>(*registry_, K(resource, group));
    }
    auto i = [&](const char* r) -> client::Informer& { return *informers_[r]; };
    mover_ = std::make_unique<controllers::DataMover>(
        directory_,
        controllers::DataMover::Options{.work_dir = [this](const std::string&) -> absl::StatusOr<std::string> {
          return driver_->kubelet() + "/berth-data-mover";
        }});
    backup_populator_ = std::make_unique<controllers::BackupPopulator>(*registry_, *mover_, &tracker_);
    populator_ = std::make_unique<WatchedPopulator>(*backup_populator_, *registry_);
    binder_ = std::make_unique<controllers::PvBinder>(
        *registry_,
        controllers::BinderInformers{i("persistentvolumeclaims"), i("persistentvolumes"), i("storageclasses"),
                                     i("pods"), i("nodes")},
        controllers::PvBinder::Options{});
    provisioner_ = std::make_unique<controllers::Provisioner>(
        *registry_, directory_,
        controllers::ProvisionerInformers{i("persistentvolumeclaims"), i("persistentvolumes"), i("storageclasses"),
                                          i("nodes"), i("csinodes"), nullptr},
        controllers::Provisioner::Options{
            .driver = kDriver, .workers = 2, .rpc_timeout = absl::Seconds(60), .populator = populator_.get()});
    binder_->RegisterHandlers();
    provisioner_->RegisterHandlers();
    for (auto& [r, inf] : informers_) inf->Start();
    for (auto& [r, inf] : informers_) ASSERT_TRUE(inf->WaitForSync(absl::Seconds(10)));
    binder_->Start();
    provisioner_->Start();
  }
  void StopControllers() {
    if (provisioner_) provisioner_->Stop();
    if (binder_) binder_->Stop();
    for (auto& [r, inf] : informers_) inf->Stop();
  }

  // Backup `name` of one volume "shop/data", the content of `file`, with
  // `objects`, and the Backup object, Completed.
  void Backup(const std::string& name, const std::string& file, const std::vector<json>& objects = {}) {
    Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.ok()) << file;
    const int64_t size = static_cast<int64_t>(std::filesystem::file_size(file));
    auto w = repo_->StartBackup(name);
    ASSERT_TRUE(w.ok()) << w.status();
    for (const auto& o : objects) (*w)->AddObject(o);
    auto added = (*w)->AddVolume({.name = "shop/data", .fd = fd.get(), .size_bytes = size, .ranges = {{0, size}}});
    ASSERT_TRUE(added.ok()) << added.status();
    ASSERT_TRUE((*w)->Commit().ok());
    Create("backups", kGroup, "", {{"metadata", {{"name", name}}}, {"spec", json::object()}});
    ASSERT_TRUE(registry_
                    ->Patch(K("backups", kGroup), "", name, R"({"status":{"phase":"Completed"}})",
                            apiserver::PatchType::kMerge, apiserver::Subresource::kStatus)
                    .ok());
  }
  // A claim restored from volume "shop/data" of `backup`, on our node.
  void RestoredClaim(const std::string& name, const std::string& backup, const std::string& cls,
                     const std::string& mode, const std::string& size) {
    Create("persistentvolumeclaims", "", "default",
           {{"metadata",
             {{"name", name},
              {"annotations",
               {{controllers::kAnnSourceVolume, "shop/data"}, {"volume.kubernetes.io/selected-node", kNode}}}}},
            {"spec",
             {{"accessModes", {"ReadWriteOnce"}},
              {"storageClassName", cls},
              {"volumeMode", mode},
              {"resources", {{"requests", {{"storage", size}}}}},
              {"dataSourceRef", {{"apiGroup", kGroup}, {"kind", "Backup"}, {"name", backup}}}}}});
  }
  // Stages and publishes volume `id` (block, or mounted as `fs_type`) under
  // the kubelet root, runs `use` on the published path, and takes it down.
  void UseVolume(const std::string& id, const std::string& fs_type,
                 const std::function<void(const std::string&)>& use) {
    const std::string staging = driver_->kubelet() + "/test/staging";
    const std::string target = driver_->kubelet() + "/test/target";
    std::filesystem::create_directories(staging);
    const ::csi::v1::VolumeCapability cap = fs_type.empty() ? BlockCapability() : MountCapability(fs_type);
    ::csi::v1::NodeStageVolumeRequest stage;
    stage.set_volume_id(id);
    stage.set_staging_target_path(staging);
    *stage.mutable_volume_capability() = cap;
    ::csi::v1::NodeStageVolumeResponse staged;
    grpc::Status st = driver_->node().NodeStageVolume(Ctx().get(), stage, &staged);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ::csi::v1::NodePublishVolumeRequest pub;
    pub.set_volume_id(id);
    pub.set_staging_target_path(staging);
    pub.set_target_path(target);
    *pub.mutable_volume_capability() = cap;
    ::csi::v1::NodePublishVolumeResponse published;
    st = driver_->node().NodePublishVolume(Ctx().get(), pub, &published);
    EXPECT_TRUE(st.ok()) << st.error_message();
    if (st.ok()) use(target);
    ::csi::v1::NodeUnpublishVolumeRequest unpub;
    unpub.set_volume_id(id);
    unpub.set_target_path(target);
    ::csi::v1::NodeUnpublishVolumeResponse unpublished;
    EXPECT_TRUE(driver_->node().NodeUnpublishVolume(Ctx().get(), unpub, &unpublished).ok());
    ::csi::v1::NodeUnstageVolumeRequest unstage;
    unstage.set_volume_id(id);
    unstage.set_staging_target_path(staging);
    ::csi::v1::NodeUnstageVolumeResponse unstaged;
    EXPECT_TRUE(driver_->node().NodeUnstageVolume(Ctx().get(), unstage, &unstaged).ok());
  }
  // The volume handle of claim `name` once it is Bound ("" if it never is).
  std::string BoundVolume(const std::string& name) {
    if (!Eventually([&] {
          return Str(Get("persistentvolumeclaims", "", "default", name), {"status", "phase"}) == "Bound";
        })) {
      ADD_FAILURE() << "claim " << name << " never bound\n" << driver_->Log();
      return "";
    }
    const json claim = Get("persistentvolumeclaims", "", "default", name);
    return Str(Get("persistentvolumes", "", "", Str(claim, {"spec", "volumeName"})), {"spec", "csi", "volumeHandle"});
  }

  // An ext4 image holding hello.txt (kText), and class "ext4" for it. 4 KiB
  // blocks, as berth-csi's loop devices have 4 KiB sectors (mkfs would pick
  // 1 KiB for so small a filesystem).
  std::string Ext4Image() {
    const std::string tree = dir_.Join("tree");
    std::filesystem::create_directories(tree);
    std::ofstream(tree + "/hello.txt") << kText;
    const std::string image = dir_.Join("fs.img");
    EXPECT_EQ(std::system(("mkfs.ext4 -q -F -b 4096 -d " + tree + " " + image + " 32M").c_str()), 0);
    Create("storageclasses", "storage.k8s.io", "",
           {{"metadata", {{"name", "ext4"}}},
            {"provisioner", kDriver},
            {"volumeBindingMode", "WaitForFirstConsumer"},
            {"reclaimPolicy", "Delete"},
            {"parameters", {{"csi.storage.k8s.io/fstype", "ext4"}}}});
    return image;
  }
  std::string ReadHello(const std::string& handle) {
    std::string out;
    UseVolume(handle, "ext4", [&](const std::string& dir) {
      std::ifstream in(dir + "/hello.txt");
      std::stringstream got;
      got << in.rdbuf();
      out = got.str();
    });
    return out;
  }

  // 8 MiB: random bytes, a hole, and a few bytes at an odd offset.
  static std::string Content() {
    std::string out(kVolumeBytes, '\0');
    std::mt19937_64 rng(30);
    for (int64_t i = 0; i < 3 * kMiB; i += 8) {
      const uint64_t v = rng();
      std::memcpy(out.data() + i, &v, 8);
    }
    const std::string tail = "the end of the restored volume";
    std::memcpy(out.data() + 6 * kMiB + 4097, tail.data(), tail.size());
    return out;
  }

  void Create(std::string_view resource, std::string_view group, const std::string& ns, const json& obj) {
    auto got = registry_->Create(K(resource, group), ns, obj);
    ASSERT_TRUE(got.ok()) << resource << ": " << got.status();
  }
  json Get(std::string_view resource, std::string_view group, const std::string& ns, const std::string& name) {
    auto got = registry_->Get(K(resource, group), ns, name);
    return got.ok() ? *got : json();
  }
  std::set<std::string> DriverVolumes() {
    ::csi::v1::ListVolumesResponse resp;
    EXPECT_TRUE(driver_->controller().ListVolumes(Ctx().get(), {}, &resp).ok());
    std::set<std::string> out;
    for (const auto& e : resp.entries()) out.insert(e.volume().volume_id());
    return out;
  }
  template <class Pred>
  bool Eventually(Pred pred) {
    return berth::testing::Eventually(pred, absl::Seconds(90));
  }

  bool own_controllers_ = true;  // false: the test runs the ControllerManager
  std::unique_ptr<controllers::ControllerManager> manager_;
  TempDir dir_;
  std::string repo_path_;
  std::unique_ptr<backup::Repository> repo_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
  client::DriverDirectory directory_;
  std::map<std::string, std::unique_ptr<client::Informer>> informers_;
  controllers::RestoreTracker tracker_;
  std::unique_ptr<controllers::DataMover> mover_;
  std::unique_ptr<controllers::BackupPopulator> backup_populator_;
  std::unique_ptr<WatchedPopulator> populator_;
  std::unique_ptr<controllers::PvBinder> binder_;
  std::unique_ptr<controllers::Provisioner> provisioner_;
};

TEST_F(RestoreBerthCsiTest, ABlockClaimFromABackupHoldsExactlyItsBytesBeforeItBinds) {
  const std::string content = Content();
  const std::string file = dir_.Join("volume.img");
  {
    Fd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_EQ(::pwrite(fd.get(), content.data(), content.size(), 0), static_cast<ssize_t>(content.size()));
  }
  Backup("nightly", file);
  RestoredClaim("data", "nightly", "local", "Block", "8Mi");
  const std::string handle = BoundVolume("data");
  ASSERT_FALSE(handle.empty());
  EXPECT_EQ(populator_->filled, 1);
  EXPECT_FALSE(populator_->pv_before_filled);
  auto progress = tracker_.Get(Str(Get("persistentvolumeclaims", "", "default", "data"), {"metadata", "uid"}));
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->bytes_done, kVolumeBytes);

  // The filled volume goes once the claim's own exists; only that is left.
  ASSERT_TRUE(Eventually([&] {
    return DriverVolumes() == std::set<std::string>{handle} &&
           client::Annotation(Get("persistentvolumeclaims", "", "default", "data"), controllers::kAnnPopulatedVolume)
               .empty();
  })) << driver_->Log();
  UseVolume(handle, "", [&](const std::string& device) {
    std::string got(static_cast<size_t>(kVolumeBytes), '\0');
    Fd fd(::open(device.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.ok()) << device;
    ASSERT_EQ(::pread(fd.get(), got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
    EXPECT_TRUE(got == content) << "the restored volume differs from the backed-up one";
  });

  // Deleting the claim deletes the volume; nothing stays in the driver or
  // the node's mover directory.
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] { return DriverVolumes().empty(); })) << driver_->Log();
  EXPECT_TRUE(std::filesystem::is_empty(driver_->kubelet() + "/berth-data-mover"));
}

TEST_F(RestoreBerthCsiTest, AFilesystemClaimIsTheBackedUpFilesystemMountedAgain) {
  // The backup of a filesystem volume is its raw device.
  Backup("fs", Ext4Image());
  RestoredClaim("files", "fs", "ext4", "Filesystem", "64Mi");
  const std::string handle = BoundVolume("files");
  ASSERT_FALSE(handle.empty());
  EXPECT_EQ(ReadHello(handle), kText);
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "files").ok());
  ASSERT_TRUE(Eventually([&] { return DriverVolumes().empty(); })) << driver_->Log();
}

TEST_F(RestoreBerthCsiTest, AFlippedByteInTheRepositoryRestoresNothingAndNamesTheChunk) {
  const std::string content = Content();
  const std::string file = dir_.Join("volume.img");
  {
    Fd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_EQ(::pwrite(fd.get(), content.data(), content.size(), 0), static_cast<ssize_t>(content.size()));
  }
  Backup("nightly", file);
  // One byte of one stored chunk flipped.
  std::string chunk;
  for (const auto& e : std::filesystem::recursive_directory_iterator(repo_path_ + "/chunks")) {
    if (e.is_regular_file()) chunk = e.path().string();
  }
  ASSERT_FALSE(chunk.empty());
  {
    Fd fd(::open(chunk.c_str(), O_RDWR | O_CLOEXEC));
    char b = 0;
    ASSERT_EQ(::pread(fd.get(), &b, 1, 20), 1);
    b = static_cast<char>(b ^ 0x40);
    ASSERT_EQ(::pwrite(fd.get(), &b, 1, 20), 1);
  }
  RestoredClaim("data", "nightly", "local", "Block", "8Mi");
  const std::string hash = std::filesystem::path(chunk).stem().string();
  ASSERT_TRUE(Eventually([&] {
    auto uid = Str(Get("persistentvolumeclaims", "", "default", "data"), {"metadata", "uid"});
    auto entry = tracker_.Get(uid);
    return entry && entry->permanent;
  }));
  auto entry = tracker_.Get(Str(Get("persistentvolumeclaims", "", "default", "data"), {"metadata", "uid"}));
  EXPECT_EQ(entry->error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(entry->error.message()), ::testing::HasSubstr(hash.substr(0, 12)));
  EXPECT_THAT(std::string(entry->error.message()), ::testing::HasSubstr("nightly"));
  EXPECT_THAT(std::string(entry->error.message()), ::testing::HasSubstr("volume berth-restore-"));
  // The claim stays unbound, and the volume that was being filled is gone
  // (it is filled afresh on each retry and removed when a fill fails).
  EXPECT_NE(Str(Get("persistentvolumeclaims", "", "default", "data"), {"status", "phase"}), "Bound");
  auto pvs = registry_->List(K("persistentvolumes"), "", {});
  ASSERT_TRUE(pvs.ok());
  EXPECT_TRUE(pvs->items.empty());
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] {
    return Get("persistentvolumeclaims", "", "default", "data").is_null() && DriverVolumes().empty();
  })) << driver_->Log();
}

// The whole path as berth up runs it: a Restore object, the restore
// controller creating the namespace, claim and pod, the scheduler choosing
// the node, the provisioner filling the claim there, the pod bound.
class RestoreThroughManagerTest : public RestoreBerthCsiTest {
 protected:
  RestoreThroughManagerTest() { own_controllers_ = false; }
};

TEST_F(RestoreThroughManagerTest, ARestoreBringsBackTheClaimWithItsDataAndThePodInAMappedNamespace) {
  const std::string image = Ext4Image();
  const json claim = {{"apiVersion", "v1"},
                      {"kind", "PersistentVolumeClaim"},
                      {"metadata", {{"name", "data"}, {"namespace", "shop"}, {"uid", "old-claim"}}},
                      {"spec",
                       {{"accessModes", {"ReadWriteOnce"}},
                        {"storageClassName", "ext4"},
                        {"resources", {{"requests", {{"storage", "64Mi"}}}}},
                        {"volumeName", "pvc-old-claim"}}},
                      {"status", {{"phase", "Bound"}}}};
  const json pod = {{"apiVersion", "v1"},
                    {"kind", "Pod"},
                    {"metadata", {{"name", "db"}, {"namespace", "shop"}, {"uid", "old-pod"}}},
                    {"spec",
                     {{"nodeName", "node-gone"},
                      {"containers", {{{"name", "db"}, {"image", "busybox"}}}},
                      {"volumes", {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", "data"}}}}}}}}};
  Backup("nightly", image, {claim, pod});
  controllers::ControllerManager::Options options;
  options.drivers = {kDriver};
  options.rpc_timeout = absl::Seconds(60);
  options.data_mover_work_dir = [this](const std::string&) -> absl::StatusOr<std::string> {
    return driver_->kubelet() + "/berth-data-mover";
  };
  manager_ = std::make_unique<controllers::ControllerManager>(*registry_, directory_, options);
  ASSERT_TRUE(manager_->Start().ok());
  Create("restores", kGroup, "",
         {{"metadata", {{"name", "r1"}}},
          {"spec", {{"backupName", "nightly"}, {"namespaceMapping", {{"shop", "staging"}}}}}});
  ASSERT_TRUE(Eventually([&] {
    return Str(Get("restores", kGroup, "", "r1"), {"status", "phase"}) == "Completed";
  })) << Get("restores", kGroup, "", "r1").dump()
      << driver_->Log();
  const json status = Get("restores", kGroup, "", "r1")["status"];
  EXPECT_EQ(status["progress"]["itemsRestored"], 2);
  EXPECT_EQ(status["progress"]["totalBytes"], 32 * kMiB);
  EXPECT_EQ(status["progress"]["bytesDone"], status["progress"]["totalBytes"]);
  ASSERT_TRUE(Eventually([&] { return Str(Get("pods", "", "staging", "db"), {"spec", "nodeName"}) == kNode; }));
  const json restored = Get("persistentvolumeclaims", "", "staging", "data");
  EXPECT_EQ(client::Annotation(restored, "volume.kubernetes.io/selected-node"), kNode);  // the scheduler's choice
  const std::string handle =
      Str(Get("persistentvolumes", "", "", Str(restored, {"spec", "volumeName"})), {"spec", "csi", "volumeHandle"});
  ASSERT_TRUE(Eventually([&] { return DriverVolumes() == std::set<std::string>{handle}; })) << driver_->Log();

  // Tear down: the pod goes (as its node agent finally deletes it), then its
  // attachment; the volume holds the file; the claim and its volume go.
  apiserver::DeleteOptions gone;
  gone.grace_period_seconds = 0;
  ASSERT_TRUE(registry_->Delete(K("pods"), "staging", "db", gone).ok());
  ASSERT_TRUE(Eventually([&] {
    auto vas = registry_->List(K("volumeattachments", "storage.k8s.io"), "", {});
    return vas.ok() && vas->items.empty();
  }));
  EXPECT_EQ(ReadHello(handle), kText);
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "staging", "data").ok());
  ASSERT_TRUE(Eventually([&] { return DriverVolumes().empty(); })) << driver_->Log();
}

}  // namespace
}  // namespace berth::testing
