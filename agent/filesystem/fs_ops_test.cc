#include "agent/filesystem/fs_ops.h"

#include <gtest/gtest.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "agent/filesystem/identity.h"
#include "common/testing/temp_dir.h"

namespace cordon::agent::filesystem {
namespace {

using connect::Code;

constexpr uid_t kNobody = 65534;

UnixUser self_user(const std::string& home) {
  UnixUser u;
  u.name = getuid() == 0 ? "root" : "me";
  u.uid = getuid();
  u.gid = getgid();
  u.home = home;
  return u;
}

UnixUser nobody(const std::string& home) {
  UnixUser u;
  u.name = "nobody";
  u.uid = kNobody;
  u.gid = kNobody;
  u.home = home;
  return u;
}

template <class T>
Code code_of(const connect::RpcResult<T>& r) {
  EXPECT_TRUE(std::holds_alternative<connect::RpcError>(r));
  return std::holds_alternative<connect::RpcError>(r) ? std::get<connect::RpcError>(r).code
                                                      : Code::kUnknown;
}

template <class T>
const T& ok(const connect::RpcResult<T>& r) {
  if (auto* e = std::get_if<connect::RpcError>(&r)) ADD_FAILURE() << e->message;
  static const T empty;
  return std::holds_alternative<T>(r) ? std::get<T>(r) : empty;
}

class FsOps : public ::testing::Test {
 protected:
  cordon::testing::TempDir dir_{"agentfs"};
  FsContext ctx_{self_user(dir_.path()), ""};
  std::string p(const std::string& rel) { return dir_.path() + "/" + rel; }
  void write(const std::string& rel, const std::string& data) { std::ofstream(p(rel)) << data; }
};

TEST_F(FsOps, StatFileMissingAndBadPath) {
  write("a.txt", "abc");
  pb::StatRequest req;
  req.set_path(p("a.txt"));
  auto r = stat(ctx_, req);
  EXPECT_EQ(ok(r).entry().size(), 3);
  req.set_path("a.txt");  // relative: against the home
  EXPECT_EQ(ok(stat(ctx_, req)).entry().path(), p("a.txt"));
  req.set_path(p("missing"));
  EXPECT_EQ(code_of(stat(ctx_, req)), Code::kNotFound);
  req.set_path("~other/x");
  EXPECT_EQ(code_of(stat(ctx_, req)), Code::kInvalidArgument);
}

TEST_F(FsOps, MakeDirCreatesParentsThenAlreadyExists) {
  pb::MakeDirRequest req;
  req.set_path(p("x/y/z"));
  auto r = make_dir(ctx_, req);
  EXPECT_EQ(ok(r).entry().type(), pb::FILE_TYPE_DIRECTORY);
  EXPECT_EQ(ok(r).entry().permissions(), "drwxr-xr-x");
  struct stat st {};
  ASSERT_EQ(::stat(p("x").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  EXPECT_EQ(code_of(make_dir(ctx_, req)), Code::kAlreadyExists);
  write("file", "");
  req.set_path(p("file"));
  EXPECT_EQ(code_of(make_dir(ctx_, req)), Code::kInvalidArgument);
  req.set_path(p("file/sub"));
  EXPECT_NE(code_of(make_dir(ctx_, req)), Code::kAlreadyExists);
}

TEST_F(FsOps, MoveRenamesAndCreatesParents) {
  write("a.txt", "abc");
  pb::MoveRequest req;
  req.set_source(p("a.txt"));
  req.set_destination(p("new/dir/b.txt"));
  auto r = move(ctx_, req);
  EXPECT_EQ(ok(r).entry().path(), p("new/dir/b.txt"));
  EXPECT_EQ(ok(r).entry().name(), "b.txt");
  EXPECT_NE(access(p("a.txt").c_str(), F_OK), 0);
  EXPECT_EQ(code_of(move(ctx_, req)), Code::kNotFound);
}

TEST_F(FsOps, ListDirDepthOrderAndSymlinks) {
  write("b.txt", "1");
  mkdir(p("a").c_str(), 0755);
  write("a/inner.txt", "22");
  mkdir(p("a/deeper").c_str(), 0755);
  write("a/deeper/x", "");
  ASSERT_EQ(symlink("a", p("link").c_str()), 0);
  pb::ListDirRequest req;
  req.set_path(dir_.path());
  auto r1 = list_dir(ctx_, req);  // depth 0 = 1
  const auto& l1 = ok(r1);
  ASSERT_EQ(l1.entries_size(), 3);
  EXPECT_EQ(l1.entries(0).path(), p("a"));
  EXPECT_EQ(l1.entries(1).path(), p("b.txt"));
  EXPECT_EQ(l1.entries(2).path(), p("link"));
  EXPECT_EQ(l1.entries(2).type(), pb::FILE_TYPE_SYMLINK);
  EXPECT_TRUE(l1.entries(2).has_symlink_target());
  req.set_depth(2);
  auto r2 = list_dir(ctx_, req);
  std::vector<std::string> paths;
  for (auto& e : ok(r2).entries()) paths.push_back(e.path());
  EXPECT_EQ(paths, (std::vector<std::string>{p("a"), p("a/deeper"), p("a/inner.txt"), p("b.txt"),
                                             p("link")}));
  req.set_depth(10);
  EXPECT_EQ(ok(list_dir(ctx_, req)).entries_size(), 6);
  // Through a symlinked root: paths stay under the requested path.
  req.set_path(p("link"));
  req.set_depth(1);
  auto rl = list_dir(ctx_, req);
  ASSERT_EQ(ok(rl).entries_size(), 2);
  EXPECT_EQ(ok(rl).entries(0).path(), p("link/deeper"));
  req.set_path(p("b.txt"));
  EXPECT_EQ(code_of(list_dir(ctx_, req)), Code::kInvalidArgument);
  req.set_path(p("none"));
  EXPECT_EQ(code_of(list_dir(ctx_, req)), Code::kNotFound);
}

TEST_F(FsOps, RemoveFileDirAndMissing) {
  write("f", "x");
  mkdir(p("d").c_str(), 0755);
  write("d/inner", "x");
  ASSERT_EQ(symlink(p("d").c_str(), p("l").c_str()), 0);
  pb::RemoveRequest req;
  req.set_path(p("l"));  // removes the link, not the directory behind it
  ok(remove(ctx_, req));
  EXPECT_EQ(access(p("d/inner").c_str(), F_OK), 0);
  req.set_path(p("f"));
  ok(remove(ctx_, req));
  req.set_path(p("d"));
  ok(remove(ctx_, req));
  EXPECT_NE(access(p("d").c_str(), F_OK), 0);
  EXPECT_EQ(code_of(remove(ctx_, req)), Code::kNotFound);
}

class FsOpsAsUser : public FsOps {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
    chmod(dir_.path().c_str(), 0755);
    mkdir(p("mine").c_str(), 0755);
    ASSERT_EQ(chown(p("mine").c_str(), kNobody, kNobody), 0);
    user_ctx_ = FsContext{nobody(p("mine")), ""};
  }
  FsContext user_ctx_;
};

TEST_F(FsOpsAsUser, PermissionDeniedInRootsDirectory) {
  pb::MakeDirRequest mk;
  mk.set_path(p("not-mine"));
  EXPECT_EQ(code_of(make_dir(user_ctx_, mk)), Code::kPermissionDenied);
  write("rootfile", "x");
  pb::RemoveRequest rm;
  rm.set_path(p("rootfile"));
  EXPECT_EQ(code_of(remove(user_ctx_, rm)), Code::kPermissionDenied);
  pb::MoveRequest mv;
  mv.set_source(p("rootfile"));
  mv.set_destination(p("mine/stolen"));
  EXPECT_EQ(code_of(move(user_ctx_, mv)), Code::kPermissionDenied);
  // The thread is root again afterwards.
  EXPECT_EQ(setfsuid(static_cast<uid_t>(-1)), 0);
  EXPECT_EQ(setfsgid(static_cast<gid_t>(-1)), 0);
}

TEST_F(FsOpsAsUser, CreatedDirectoriesBelongToTheUser) {
  pb::MakeDirRequest mk;
  mk.set_path("sub/dir");  // relative to the user's home (p("mine"))
  auto r = make_dir(user_ctx_, mk);
  EXPECT_EQ(ok(r).entry().path(), p("mine/sub/dir"));
  EXPECT_EQ(ok(r).entry().owner(), "nobody");
  struct stat st {};
  ASSERT_EQ(::stat(p("mine/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_EQ(st.st_gid, kNobody);
  mk.set_path(p("mine/sub/dir"));
  auto rr = make_dir(ctx_, mk);
  EXPECT_EQ(code_of(rr), Code::kAlreadyExists);
}

TEST_F(FsOpsAsUser, UnreadableSubdirectoryIsListedNotEntered) {
  mkdir(p("mine/closed").c_str(), 0700);  // root's, 0700: nobody cannot enter
  write("mine/closed/secret", "x");
  pb::ListDirRequest req;
  req.set_path(p("mine"));
  req.set_depth(3);
  auto r = list_dir(user_ctx_, req);
  ASSERT_EQ(ok(r).entries_size(), 1);
  EXPECT_EQ(ok(r).entries(0).path(), p("mine/closed"));
  req.set_path(p("mine/closed"));
  EXPECT_EQ(code_of(list_dir(user_ctx_, req)), Code::kPermissionDenied);
}

// The switch is per thread: while one thread acts as nobody, another keeps root's rights and
// groups (glibc's setgroups() would have changed every thread).
TEST_F(FsOpsAsUser, ScopeIsPerThread) {
  std::vector<gid_t> before(64);
  before.resize(getgroups(before.size(), before.data()));
  std::atomic<int> stage{0};
  std::thread other([&] {
    UserScope scope(user_ctx_.user);
    ASSERT_TRUE(scope.status());
    EXPECT_EQ(setfsuid(static_cast<uid_t>(-1)), static_cast<int>(kNobody));
    stage = 1;
    while (stage != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (stage != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(setfsuid(static_cast<uid_t>(-1)), 0);
  std::vector<gid_t> during(64);
  during.resize(getgroups(during.size(), during.data()));
  EXPECT_EQ(during, before);
  pb::MakeDirRequest mk;
  mk.set_path(p("root-only"));
  ok(make_dir(ctx_, mk));  // root's directory, writable only by root
  stage = 2;
  other.join();
}

TEST(UserScope, RefusesOtherUsersWhenNotRoot) {
  if (geteuid() == 0) GTEST_SKIP() << "only meaningful without root";
  UserScope s(nobody("/"));
  EXPECT_FALSE(s.status());
}

}  // namespace
}  // namespace cordon::agent::filesystem
