#include "csi/redact.h"

#include "berth_testdata/redact_test.pb.h"
#include "csi/v1/csi.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::csi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RedactTest, TopLevelSecretMapIsStripped) {
  ::csi::v1::CreateVolumeRequest r;
  r.set_name("pvc-1");
  (*r.mutable_secrets())["password"] = "hunter2";
  (*r.mutable_parameters())["b"] = "2";
  (*r.mutable_parameters())["a"] = "1";
  EXPECT_EQ(RedactedDebugString(r), R"({"name":"pvc-1","parameters":{"a":"1","b":"2"},"secrets":"***stripped***"})");
}

TEST(RedactTest, SecretsAtEveryDepthAreStripped) {
  berth::testdata::Outer o;
  o.set_name("outer");
  o.mutable_inner()->set_visible("seen");
  o.mutable_inner()->set_token("SECRET-A");
  (*o.mutable_inner()->mutable_creds())["user"] = "SECRET-B";
  auto* in_list = o.add_list();
  in_list->set_token("SECRET-C");
  in_list->set_visible("listed");
  auto& in_map = (*o.mutable_by_key())["k"];
  in_map.set_token("SECRET-D");
  (*in_map.mutable_creds())["x"] = "SECRET-E";
  (*o.mutable_request()->mutable_secrets())["y"] = "SECRET-F";
  o.mutable_request()->set_name("req");

  const std::string s = RedactedDebugString(o);
  EXPECT_THAT(s, Not(HasSubstr("SECRET")));
  EXPECT_THAT(s, HasSubstr(R"("visible":"seen")"));
  EXPECT_THAT(s, HasSubstr(R"("visible":"listed")"));
  EXPECT_THAT(s, HasSubstr(R"("name":"req")"));
  EXPECT_EQ(s, R"({"name":"outer",)"
               R"("inner":{"visible":"seen","token":"***stripped***","creds":"***stripped***"},)"
               R"("list":[{"visible":"listed","token":"***stripped***"}],)"
               R"("by_key":{"k":{"token":"***stripped***","creds":"***stripped***"}},)"
               R"("request":{"name":"req","secrets":"***stripped***"}})");
}

TEST(RedactTest, EscapesStringsAndNamesEnums) {
  ::csi::v1::VolumeCapability cap;
  cap.mutable_mount()->add_mount_flags("a\"b\n");
  cap.mutable_access_mode()->set_mode(::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  EXPECT_EQ(RedactedDebugString(cap),
            R"({"mount":{"mount_flags":["a\"b\n"]},"access_mode":{"mode":"SINGLE_NODE_WRITER"}})");
}

TEST(RedactTest, IsSecretFieldReadsTheOption) {
  const auto* d = ::csi::v1::NodePublishVolumeRequest::descriptor();
  EXPECT_TRUE(IsSecretField(*d->FindFieldByName("secrets")));
  EXPECT_FALSE(IsSecretField(*d->FindFieldByName("volume_context")));
}

}  // namespace
}  // namespace berth::csi
