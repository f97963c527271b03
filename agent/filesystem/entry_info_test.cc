#include "agent/filesystem/entry_info.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fstream>

#include "agent/connect/connect.h"
#include "common/testing/temp_dir.h"

namespace cordon::agent::filesystem {
namespace {

TEST(EntryInfo, GoModeStrings) {
  EXPECT_EQ(go_mode_string(S_IFREG | 0644), "-rw-r--r--");
  EXPECT_EQ(go_mode_string(S_IFDIR | 0755), "drwxr-xr-x");
  EXPECT_EQ(go_mode_string(S_IFLNK | 0777), "Lrwxrwxrwx");
  EXPECT_EQ(go_mode_string(S_IFDIR | S_ISVTX | 0777), "dtrwxrwxrwx");
  EXPECT_EQ(go_mode_string(S_IFCHR | 0666), "Dcrw-rw-rw-");
  EXPECT_EQ(go_mode_string(S_IFBLK | 0660), "Drw-rw----");
  EXPECT_EQ(go_mode_string(S_IFIFO | 0600), "prw-------");
  EXPECT_EQ(go_mode_string(S_IFSOCK | 0755), "Srwxr-xr-x");
  EXPECT_EQ(go_mode_string(S_IFREG | S_ISUID | 0755), "urwxr-xr-x");
  EXPECT_EQ(go_mode_string(S_IFDIR | S_ISGID | 02775), "dgrwxrwxr-x");
}

TEST(EntryInfo, FileFields) {
  cordon::testing::TempDir dir("agentfs");
  std::string p = dir.path() + "/a.txt";
  std::ofstream(p) << "hello";
  chmod(p.c_str(), 0640);
  NameCache names;
  auto e = stat_entry(p, names);
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(e->name(), "a.txt");
  EXPECT_EQ(e->path(), p);
  EXPECT_EQ(e->type(), pb::FILE_TYPE_FILE);
  EXPECT_EQ(e->size(), 5);
  EXPECT_EQ(e->mode(), 0640u);
  EXPECT_EQ(e->permissions(), "-rw-r-----");
  struct stat st {};
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  EXPECT_EQ(e->modified_time().seconds(), st.st_mtim.tv_sec);
  EXPECT_EQ(e->modified_time().nanos(), st.st_mtim.tv_nsec);
  EXPECT_FALSE(e->has_symlink_target());
  if (getuid() == 0) {
    EXPECT_EQ(e->owner(), "root");
    EXPECT_EQ(e->group(), "root");
  }
  // The proto3 JSON the SDK sees.
  std::string json = connect::to_json(*e);
  EXPECT_NE(json.find("\"size\":\"5\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"mode\":416"), std::string::npos) << json;
  EXPECT_NE(json.find("\"type\":\"FILE_TYPE_FILE\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"modifiedTime\":\"20"), std::string::npos) << json;
}

TEST(EntryInfo, SymlinksAndUnknownIds) {
  cordon::testing::TempDir dir("agentfs");
  std::string target = dir.path() + "/sub";
  mkdir(target.c_str(), 0750);
  std::string link = dir.path() + "/link";
  ASSERT_EQ(symlink("sub", link.c_str()), 0);
  std::string dangling = dir.path() + "/dangling";
  ASSERT_EQ(symlink("nowhere", dangling.c_str()), 0);
  NameCache names;
  auto e = stat_entry(link, names);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type(), pb::FILE_TYPE_SYMLINK);
  EXPECT_EQ(e->permissions(), "Lrwxrwxrwx");
  char real[PATH_MAX];
  ASSERT_NE(realpath(target.c_str(), real), nullptr);
  EXPECT_EQ(e->symlink_target(), real);
  EXPECT_EQ(e->mode(), 0750u);
  auto d = stat_entry(dangling, names);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->symlink_target(), "nowhere");
  if (getuid() == 0) {
    std::string f = dir.path() + "/f";
    std::ofstream(f) << "";
    ASSERT_EQ(chown(f.c_str(), 54321, 54322), 0);
    auto o = stat_entry(f, names);
    EXPECT_EQ(o->owner(), "54321");
    EXPECT_EQ(o->group(), "54322");
  }
  auto missing = stat_entry(dir.path() + "/none", names);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ENOENT);
}

TEST(EntryInfo, Metadata) {
  cordon::testing::TempDir dir("agentfs");
  std::string p = dir.path() + "/m";
  int fd = open(p.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  auto s = write_metadata(fd, {{"owner", "alice"}, {"k2", "v2"}});
  ASSERT_TRUE(s) << s.error().message;
  if (fsetxattr(fd, "user.other", "x", 1, 0) != 0 && errno == ENOTSUP) {
    close(fd);
    GTEST_SKIP() << "the temp filesystem has no user xattrs";
  }
  auto m = read_metadata(p);
  EXPECT_EQ(m, (std::map<std::string, std::string>{{"k2", "v2"}, {"owner", "alice"}}));
  ASSERT_TRUE(write_metadata(fd, {{"owner", "bob"}}));  // k2 is dropped
  close(fd);
  EXPECT_EQ(read_metadata(p), (std::map<std::string, std::string>{{"owner", "bob"}}));
  NameCache names;
  EXPECT_EQ(stat_entry(p, names)->metadata().at("owner"), "bob");
}

TEST(EntryInfo, MetadataValidation) {
  EXPECT_TRUE(validate_metadata({{"a", "printable value"}}));
  EXPECT_FALSE(validate_metadata({{"", "x"}}));
  EXPECT_FALSE(validate_metadata({{"a", "tab\there"}}));
  EXPECT_FALSE(validate_metadata({{std::string(247, 'k'), "x"}}));
  EXPECT_FALSE(validate_metadata({{"a", std::string(5000, 'v')}}));
}

}  // namespace
}  // namespace cordon::agent::filesystem
