#include "agent/filesystem/paths.h"

#include <gtest/gtest.h>

namespace cordon::agent::filesystem {
namespace {

UnixUser user() {
  UnixUser u;
  u.name = "user";
  u.uid = 1000;
  u.gid = 1000;
  u.home = "/home/user";
  return u;
}

TEST(Paths, AbsoluteIsCleaned) {
  EXPECT_EQ(*resolve_path("/tmp/a.txt", user(), ""), "/tmp/a.txt");
  EXPECT_EQ(*resolve_path("/tmp//x/./y/../a.txt/", user(), ""), "/tmp/x/a.txt");
  EXPECT_EQ(*resolve_path("/../..", user(), ""), "/");
}

TEST(Paths, RelativeAgainstHome) {
  EXPECT_EQ(*resolve_path("a.txt", user(), "/work"), "/home/user/a.txt");
  EXPECT_EQ(*resolve_path("../other/x", user(), ""), "/home/other/x");
  EXPECT_EQ(*resolve_path("~", user(), ""), "/home/user");
  EXPECT_EQ(*resolve_path("~/d/e", user(), ""), "/home/user/d/e");
}

TEST(Paths, EmptyMeansWorkdirElseHome) {
  EXPECT_EQ(*resolve_path("", user(), "/work"), "/work");
  EXPECT_EQ(*resolve_path("", user(), ""), "/home/user");
}

TEST(Paths, BadInput) {
  auto r = resolve_path("~root/x", user(), "");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("another user's home"), std::string::npos);
  EXPECT_FALSE(resolve_path(std::string("/tmp/a\0b", 8), user(), ""));
  UnixUser homeless = user();
  homeless.home = "";
  EXPECT_FALSE(resolve_path("rel", homeless, ""));
  EXPECT_TRUE(resolve_path("/abs", homeless, ""));
}

TEST(Paths, BaseAndDirName) {
  EXPECT_EQ(base_name("/tmp/a.txt"), "a.txt");
  EXPECT_EQ(base_name("/"), "/");
  EXPECT_EQ(dir_name("/tmp/a.txt"), "/tmp");
  EXPECT_EQ(dir_name("/a"), "/");
}

}  // namespace
}  // namespace cordon::agent::filesystem
