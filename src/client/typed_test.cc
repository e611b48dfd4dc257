#include "client/typed.h"

#include "api/types/core.h"
#include "apiserver/registry.h"
#include "client/object.h"
#include "client/testing/registry_fixture.h"
#include "gtest/gtest.h"

namespace berth::client {
namespace {

using nlohmann::json;
using types::PersistentVolumeClaim;

class MutateFromTest : public testing::RegistryTest {
 protected:
  PersistentVolumeClaim Claim(const std::string& name) {
    return *types::Decode<PersistentVolumeClaim>(RegistryTest::Claim(name));
  }
  PersistentVolumeClaim Stored(const std::string& name) {
    return *GetTyped<PersistentVolumeClaim>(*registry_, K("persistentvolumeclaims"), "default", name);
  }
  static std::function<bool(PersistentVolumeClaim&)> Annotate(const std::string& key) {
    return [key](PersistentVolumeClaim& c) {
      if (!c.metadata.Annotation(key).empty()) return false;
      c.metadata.annotations[key] = "yes";
      return true;
    };
  }
};

TEST_F(MutateFromTest, WritesFromTheCopyGivenAndNothingWhenNothingChanges) {
  const PersistentVolumeClaim known = Claim("a");
  ASSERT_TRUE(MutateFrom<PersistentVolumeClaim>(*registry_, K("persistentvolumeclaims"), known,
                                                apiserver::Subresource::kMain, Annotate("x"))
                  .ok());
  const PersistentVolumeClaim written = Stored("a");
  EXPECT_EQ(written.metadata.Annotation("x"), "yes");
  EXPECT_NE(written.metadata.resource_version, known.metadata.resource_version);
  ASSERT_TRUE(MutateFrom<PersistentVolumeClaim>(*registry_, K("persistentvolumeclaims"), written,
                                                apiserver::Subresource::kMain, Annotate("x"))
                  .ok());
  EXPECT_EQ(Stored("a").metadata.resource_version, written.metadata.resource_version) << "nothing to write";
}

TEST_F(MutateFromTest, AStaleCopyIsRetriedOnTheStoredObjectKeepingWhatOthersWrote) {
  const PersistentVolumeClaim stale = Claim("a");
  ASSERT_TRUE(MutateFrom<PersistentVolumeClaim>(*registry_, K("persistentvolumeclaims"), stale,
                                                apiserver::Subresource::kMain, Annotate("theirs"))
                  .ok());
  ASSERT_TRUE(MutateFrom<PersistentVolumeClaim>(*registry_, K("persistentvolumeclaims"), stale,
                                                apiserver::Subresource::kMain, Annotate("ours"))
                  .ok());
  const PersistentVolumeClaim now = Stored("a");
  EXPECT_EQ(now.metadata.Annotation("theirs"), "yes") << "the stale copy must not overwrite a newer write";
  EXPECT_EQ(now.metadata.Annotation("ours"), "yes");
}

TEST_F(MutateFromTest, AReplacedOrDeletedObjectIsLeftAlone) {
  const PersistentVolumeClaim old = Claim("a");
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "a").ok());
  EXPECT_TRUE(MutateFrom<PersistentVolumeClaim>(*registry_, K("persistentvolumeclaims"), old,
                                                apiserver::Subresource::kMain, Annotate("x"))
                  .ok());
  const PersistentVolumeClaim fresh = Claim("a");
  EXPECT_TRUE(MutateFrom<PersistentVolumeClaim>(*registry_, K("persistentvolumeclaims"), old,
                                                apiserver::Subresource::kMain, Annotate("x"))
                  .ok());
  const PersistentVolumeClaim now = Stored("a");
  EXPECT_EQ(now.metadata.uid, fresh.metadata.uid);
  EXPECT_EQ(now.metadata.Annotation("x"), "") << "another object of the same name is not the one the copy was of";
}

}  // namespace
}  // namespace berth::client
