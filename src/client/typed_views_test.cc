#include "client/typed_views.h"

#include <string>

#include "gtest/gtest.h"

namespace berth::client {
namespace {

using nlohmann::json;

std::shared_ptr<const json> Object(const std::string& name) {
  return std::make_shared<const json>(json{{"metadata", {{"name", name}}}});
}

std::shared_ptr<const void> View(const std::string& text) { return std::make_shared<const std::string>(text); }

std::string Text(const std::shared_ptr<const void>& view) {
  return view == nullptr ? "(none)" : *std::static_pointer_cast<const std::string>(view);
}

TEST(TypedViewsTest, AViewIsFoundForItsObjectAndTypeOnly) {
  TypedViews views;
  auto a = Object("a");
  auto a_again = Object("a");  // equal, but another object (another version)
  EXPECT_EQ(views.Find(a, typeid(std::string)), nullptr);
  views.Keep(a, typeid(std::string), View("view of a"));
  EXPECT_EQ(Text(views.Find(a, typeid(std::string))), "view of a");
  EXPECT_EQ(views.Find(a_again, typeid(std::string)), nullptr);
  EXPECT_EQ(views.Find(a, typeid(int)), nullptr);
  // Kept as another type: that one replaces it.
  views.Keep(a, typeid(int), View("a as int"));
  EXPECT_EQ(views.Find(a, typeid(std::string)), nullptr);
  EXPECT_EQ(Text(views.Find(a, typeid(int))), "a as int");
  const TypedViews::Counts counts = views.counts();
  EXPECT_EQ(counts.hits, 2);
  EXPECT_EQ(counts.misses, 4);
  EXPECT_EQ(counts.kept, 1u);
}

TEST(TypedViewsTest, TheLeastRecentlyUsedGoPastTheCapacity) {
  TypedViews views(2);
  auto a = Object("a"), b = Object("b"), c = Object("c");
  views.Keep(a, typeid(std::string), View("a"));
  views.Keep(b, typeid(std::string), View("b"));
  ASSERT_NE(views.Find(a, typeid(std::string)), nullptr);  // a is now the most recently used
  views.Keep(c, typeid(std::string), View("c"));
  EXPECT_EQ(Text(views.Find(a, typeid(std::string))), "a");
  EXPECT_EQ(views.Find(b, typeid(std::string)), nullptr);
  EXPECT_EQ(Text(views.Find(c, typeid(std::string))), "c");
  EXPECT_EQ(views.counts().kept, 2u);
}

TEST(TypedViewsTest, AViewIsForItsObjectsOwnerNotJustItsAddress) {
  TypedViews views;
  // An object allocated apart from its control block can die while a kept
  // weak reference pins only the control block, and a new object can take
  // its address. Two owners of one address stand for that here (without
  // freeing anything).
  const json object{{"metadata", {{"name", "x"}}}};
  const auto no_delete = [](const json*) {};
  std::shared_ptr<const json> first(&object, no_delete);
  std::shared_ptr<const json> second(&object, no_delete);
  views.Keep(first, typeid(std::string), View("first"));
  EXPECT_EQ(views.Find(second, typeid(std::string)), nullptr);
  EXPECT_EQ(Text(views.Find(first, typeid(std::string))), "first");
  // The new owner's view replaces the old one's.
  first.reset();
  views.Keep(second, typeid(std::string), View("second"));
  EXPECT_EQ(Text(views.Find(second, typeid(std::string))), "second");
  EXPECT_EQ(views.counts().kept, 1u);
}

TEST(TypedViewsTest, ClearDropsEveryViewAndSaysHowMany) {
  TypedViews views;
  auto a = Object("a"), b = Object("b");
  std::weak_ptr<const void> view_of_a;
  {
    auto view = View("a");
    view_of_a = view;
    views.Keep(a, typeid(std::string), std::move(view));
  }
  views.Keep(b, typeid(std::string), View("b"));
  EXPECT_EQ(views.Clear(), 2u);
  EXPECT_TRUE(view_of_a.expired());  // freed, not just unreachable
  EXPECT_EQ(views.Find(a, typeid(std::string)), nullptr);
  EXPECT_EQ(views.Clear(), 0u);
}

}  // namespace
}  // namespace berth::client
