// Changed-block tracking through berth up (root; storage side only,
// --runtime none): a block claim, snapshots cut by the snapshot controller
// and berth-csi on the node's XFS pool image, and `berth snapshot allocated`
// / `berth snapshot diff` answered through the API by berth-csi's
// SnapshotMetadata service. With no container runtime, the claim's image in
// the pool is written directly, as its loop device would write it.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "up_fixture.h"

namespace berth::testing {
namespace {

constexpr int64_t kMiB = 1 << 20;

class SnapshotMetadataUpTest : public BerthUpFixture {
 protected:
  void Snapshot(const std::string& name) {
    Berth({"apply", "-f",
           WriteFile(name + ".yaml",
                     "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\n"
                     "metadata:\n  name: " +
                         name + "\nspec:\n  source:\n    persistentVolumeClaimName: blk\n")});
    Berth({"wait", "volumesnapshot/" + name, "--for", "jsonpath={.status.readyToUse}=true", "--timeout", "60s"});
  }
  // The claim's image in the node's pool.
  std::string Image() {
    const std::string pv = Claim("blk")["spec"].value("volumeName", "");
    const std::string handle = Get("/api/v1/persistentvolumes/" + pv)["spec"]["csi"].value("volumeHandle", "");
    return data_ + "/nodes/" + node_ + "/pool/volumes/" + handle + ".img";
  }
  void Write(int64_t offset, int64_t n, char fill) {
    const std::string path = Image();
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
    std::string data(static_cast<size_t>(n), fill);
    EXPECT_EQ(::pwrite(fd, data.data(), data.size(), offset), static_cast<ssize_t>(n));
    EXPECT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
};

TEST_F(SnapshotMetadataUpTest, DiffOfABlockClaimIsTheRewrittenAndNewMiB) {
  ASSERT_NO_FATAL_FAILURE(StartUp({"--runtime", "none"}));
  Berth({"apply", "-f", WriteFile("claim.yaml", R"(apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: now
provisioner: local.csi.berth.io
volumeBindingMode: Immediate
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: blk
spec:
  accessModes: [ReadWriteOnce]
  volumeMode: Block
  storageClassName: now
  resources:
    requests:
      storage: 64Mi
)")});
  Berth({"wait", "pvc/blk", "--for", "jsonpath={.status.phase}=Bound", "--timeout", "60s"});
  // 8 MiB at three offsets → s1; 1 MiB rewritten and 1 MiB new → s2.
  Write(0, 2 * kMiB, 'a');
  Write(20 * kMiB, 4 * kMiB, 'a');
  Write(40 * kMiB, 2 * kMiB, 'a');
  Snapshot("s1");
  Write(21 * kMiB, kMiB, 'b');
  Write(50 * kMiB, kMiB, 'c');
  Snapshot("s2");

  auto [rc, allocated] = RunBerth({"snapshot", "allocated", "s1", "-o", "json"});
  ASSERT_EQ(rc, 0) << allocated;
  EXPECT_EQ(json::parse(allocated)["blocks"],
            json::parse(R"([{"byteOffset": 0, "sizeBytes": 2097152}, {"byteOffset": 20971520, "sizeBytes": 4194304},
                            {"byteOffset": 41943040, "sizeBytes": 2097152}])"));

  auto [rc2, diff] = RunBerth({"snapshot", "diff", "s1", "s2", "-n", "default"});
  ASSERT_EQ(rc2, 0) << diff;
  EXPECT_EQ(diff,
            "OFFSET        SIZE          END\n"
            "22020096      1048576       23068672\n"
            "52428800      1048576       53477376\n"
            "2 ranges, 2Mi of 64Mi (VARIABLE_LENGTH)\n");

  auto [rc3, missing] = RunBerth({"snapshot", "diff", "s1", "nope"});
  EXPECT_EQ(rc3, 1);
  EXPECT_NE(missing.find("Error from server (NotFound)"), std::string::npos) << missing;
}

}  // namespace
}  // namespace berth::testing
