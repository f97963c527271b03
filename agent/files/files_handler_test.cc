#include "agent/files/files_handler.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/files/gzip.h"
#include "agent/files/signature.h"
#include "agent/files/testing/fake_exchange.h"
#include "common/testing/temp_dir.h"

namespace cordon::agent::files {
namespace {

using agent::testing::FakeExchange;
constexpr uid_t kNobody = 65534;
const std::string kBoundary = "----formdata-undici-086151415724";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string gzip(std::string_view data) {
  GzipEncoder enc;
  std::string out;
  ByteSink sink = [&](std::string_view b) {
    out.append(b);
    return Status{};
  };
  EXPECT_TRUE(enc.write(data, sink));
  EXPECT_TRUE(enc.finish(sink));
  return out;
}

std::string gunzip(std::string_view data) {
  GzipDecoder dec;
  std::string out;
  EXPECT_TRUE(dec.write(data, [&](std::string_view b) {
    out.append(b);
    return Status{};
  }));
  EXPECT_TRUE(dec.finish());
  return out;
}

std::string part(const std::string& name, const std::string& filename, const std::string& data) {
  return "--" + kBoundary + "\r\nContent-Disposition: form-data; name=\"" + name +
         "\"; filename=\"" + filename + "\"\r\nContent-Type: application/octet-stream\r\n\r\n" +
         data + "\r\n";
}
std::string closing() {
  return "--" + kBoundary + "--\r\n";
}

http::RequestHead head(const std::string& method, std::map<std::string, std::string> query = {}) {
  http::RequestHead h;
  h.method = method;
  h.path = "/files";
  h.query = std::move(query);
  return h;
}

http::RequestHead multipart_head(std::map<std::string, std::string> query = {}) {
  auto h = head("POST", std::move(query));
  h.headers["content-type"] = "multipart/form-data; boundary=" + kBoundary;
  return h;
}

UnixUser self_user(const std::string& home) {
  return UnixUser{getuid() == 0 ? "root" : "me", getuid(), getgid(), {}, home, "/bin/sh"};
}

class Files : public ::testing::Test {
 protected:
  std::string p(const std::string& rel) { return dir_.path() + "/" + rel; }
  bool no_temp_files(const std::string& d) {
    for (auto& e : std::filesystem::directory_iterator(d))
      if (e.path().filename().string().starts_with(".cordon-upload-")) return false;
    return true;
  }
  cordon::testing::TempDir dir_{"agentfiles"};
  FilesContext ctx_{self_user(dir_.path()), ""};
};

TEST_F(Files, DownloadPlainAndGzip) {
  std::string data(200000, 'q');
  data += std::string("\x00\x01\x02\xff", 4);
  std::ofstream(p("a b.txt"), std::ios::binary) << data;
  FakeExchange plain(head("GET", {{"path", p("a b.txt")}}));
  serve_download(plain, ctx_);
  EXPECT_EQ(plain.status(), 200);
  EXPECT_EQ(plain.body(), data);
  EXPECT_TRUE(plain.ended());
  EXPECT_EQ(plain.response_header("content-disposition"), "inline; filename=\"a b.txt\"");
  EXPECT_EQ(plain.response_header("content-encoding"), "");

  auto h = head("GET", {{"path", "a b.txt"}});     // relative: the home
  h.headers["accept-encoding"] = "gzip, deflate";  // fetch's default: not compressed
  FakeExchange dflt(h);
  serve_download(dflt, ctx_);
  EXPECT_EQ(dflt.response_header("content-encoding"), "");
  EXPECT_EQ(dflt.body(), data);
  h.headers["accept-encoding"] = "gzip";  // the SDK's gzip: true
  FakeExchange gz(h);
  serve_download(gz, ctx_);
  EXPECT_EQ(gz.status(), 200);
  EXPECT_EQ(gz.response_header("content-encoding"), "gzip");
  EXPECT_LT(gz.body().size(), data.size() / 10);
  EXPECT_EQ(gunzip(gz.body()), data);
}

TEST_F(Files, DownloadEmptyMissingAndDirectory) {
  std::ofstream(p("empty")) << "";
  FakeExchange e(head("GET", {{"path", p("empty")}}));
  serve_download(e, ctx_);
  EXPECT_EQ(e.status(), 200);
  EXPECT_EQ(e.body(), "");
  FakeExchange m(head("GET", {{"path", p("missing")}}));
  serve_download(m, ctx_);
  EXPECT_EQ(m.status(), 404);
  auto j = nlohmann::json::parse(m.body());
  EXPECT_EQ(j["code"], 404);
  EXPECT_NE(j["message"].get<std::string>().find("does not exist"), std::string::npos);
  FakeExchange d(head("GET", {{"path", dir_.path()}}));
  serve_download(d, ctx_);
  EXPECT_EQ(d.status(), 400);
  ASSERT_EQ(mkfifo(p("fifo").c_str(), 0644), 0);
  FakeExchange fifo(head("GET", {{"path", p("fifo")}}));
  serve_download(fifo, ctx_);
  EXPECT_EQ(fifo.status(), 400);
  FakeExchange bad(head("GET", {{"path", "~other/x"}}));
  serve_download(bad, ctx_);
  EXPECT_EQ(bad.status(), 400);
}

TEST_F(Files, MultipartSeveralFilesAnySplit) {
  std::string bin("\x00\x01\x02\xff", 4);
  std::string body = part("file", p("one.txt"), "data") + part("other", "ignored", "zzz") +
                     part("file", p("deep/er/two.bin"), bin) + closing();
  for (size_t piece : {size_t(1), size_t(7), size_t(65536)}) {
    std::filesystem::remove_all(p("deep"));
    FakeExchange ex(multipart_head(), body, piece);
    serve_upload(ex, ctx_);
    ASSERT_EQ(ex.status(), 200) << ex.body();
    auto j = nlohmann::json::parse(ex.body());
    ASSERT_EQ(j.size(), 2u) << j;
    EXPECT_EQ(j[0]["path"], p("one.txt"));
    EXPECT_EQ(j[0]["name"], "one.txt");
    EXPECT_EQ(j[0]["type"], "file");
    EXPECT_EQ(j[1]["path"], p("deep/er/two.bin"));
    EXPECT_EQ(read(p("one.txt")), "data");
    EXPECT_EQ(read(p("deep/er/two.bin")), bin);
    EXPECT_FALSE(std::filesystem::exists(p("ignored")));
    struct stat st {};
    ASSERT_EQ(stat(p("one.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
    ASSERT_EQ(stat(p("deep").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0755u);
    EXPECT_TRUE(no_temp_files(dir_.path()));
  }
}

TEST_F(Files, QueryPathWinsAndDuplicatesAreRefused) {
  FakeExchange ex(multipart_head({{"path", p("q.txt")}}),
                  part("file", "/elsewhere/x", "v") + closing());
  serve_upload(ex, ctx_);
  ASSERT_EQ(ex.status(), 200) << ex.body();
  EXPECT_EQ(read(p("q.txt")), "v");
  FakeExchange dup(multipart_head({{"path", p("q.txt")}}),
                   part("file", "a", "1") + part("file", "b", "2") + closing());
  serve_upload(dup, ctx_);
  EXPECT_EQ(dup.status(), 400);
  EXPECT_NE(dup.body().find("multiple files to the same path"), std::string::npos);
}

TEST_F(Files, OctetStreamPlainAndGzip) {
  auto h = head("POST", {{"path", "raw.bin"}});
  h.headers["content-type"] = "application/octet-stream";
  std::string data = std::string("\x00\xff", 2) + std::string(100000, 'r');
  FakeExchange ex(h, data, 999);
  serve_upload(ex, ctx_);
  ASSERT_EQ(ex.status(), 200) << ex.body();
  EXPECT_EQ(nlohmann::json::parse(ex.body())[0]["path"], p("raw.bin"));
  EXPECT_EQ(read(p("raw.bin")), data);

  h.headers["content-encoding"] = "gzip";
  h.query["path"] = p("gz.bin");
  FakeExchange gz(h, gzip(data), 100);
  serve_upload(gz, ctx_);
  ASSERT_EQ(gz.status(), 200) << gz.body();
  EXPECT_EQ(read(p("gz.bin")), data);

  auto mp = multipart_head();
  mp.headers["content-encoding"] = "gzip";
  FakeExchange gzmp(mp, gzip(part("file", p("gzmp.txt"), "inner") + closing()), 5);
  serve_upload(gzmp, ctx_);
  ASSERT_EQ(gzmp.status(), 200) << gzmp.body();
  EXPECT_EQ(read(p("gzmp.txt")), "inner");
}

TEST_F(Files, BadUploads) {
  auto raw = head("POST");
  raw.headers["content-type"] = "application/octet-stream";
  FakeExchange nopath(raw, "x");
  serve_upload(nopath, ctx_);
  EXPECT_EQ(nopath.status(), 400);

  auto json = head("POST", {{"path", p("j")}});
  json.headers["content-type"] = "application/json";
  FakeExchange wrongtype(json, "{}");
  serve_upload(wrongtype, ctx_);
  EXPECT_EQ(wrongtype.status(), 400);

  auto br = raw;
  br.query["path"] = p("b");
  br.headers["content-encoding"] = "br";
  FakeExchange brotli(br, "x");
  serve_upload(brotli, ctx_);
  EXPECT_EQ(brotli.status(), 400);

  FakeExchange todir(multipart_head(), part("file", dir_.path(), "x") + closing());
  serve_upload(todir, ctx_);
  EXPECT_EQ(todir.status(), 400);
  EXPECT_NE(todir.body().find("is a directory"), std::string::npos);

  auto md = multipart_head();
  md.headers["x-metadata-bad"] = "tab\there";
  FakeExchange badmeta(md, part("file", p("m"), "x") + closing());
  serve_upload(badmeta, ctx_);
  EXPECT_EQ(badmeta.status(), 400);
}

TEST_F(Files, TruncatedUploadLeavesOldContentAndNoTempFile) {
  std::ofstream(p("keep.txt")) << "old";
  std::string body = part("file", p("keep.txt"), std::string(100000, 'n'));  // no closing
  FakeExchange ex(multipart_head(), body, 4096);
  serve_upload(ex, ctx_);
  EXPECT_EQ(ex.status(), 400);
  EXPECT_NE(ex.body().find("no closing boundary"), std::string::npos) << ex.body();
  EXPECT_EQ(read(p("keep.txt")), "old");
  EXPECT_TRUE(no_temp_files(dir_.path()));

  FakeExchange gone(multipart_head(), part("file", p("keep.txt"), "new") + closing(), 10);
  gone.fail_body_at(50);
  serve_upload(gone, ctx_);
  EXPECT_EQ(read(p("keep.txt")), "old");
  EXPECT_TRUE(no_temp_files(dir_.path()));
}

TEST_F(Files, GzipBombIsRefused) {
  std::string bomb;
  GzipEncoder enc(Z_BEST_COMPRESSION);
  ByteSink sink = [&](std::string_view b) {
    bomb.append(b);
    return Status{};
  };
  std::string zeros(1 << 20, '\0');
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(enc.write(zeros, sink));  // 300 MiB of zeros
  ASSERT_TRUE(enc.finish(sink));
  auto h = head("POST", {{"path", p("bomb")}});
  h.headers["content-type"] = "application/octet-stream";
  h.headers["content-encoding"] = "gzip";
  FakeExchange ex(h, bomb);
  serve_upload(ex, ctx_);
  EXPECT_EQ(ex.status(), 400);
  EXPECT_NE(ex.body().find("decompression bomb"), std::string::npos) << ex.body();
  EXPECT_FALSE(std::filesystem::exists(p("bomb")));
  EXPECT_TRUE(no_temp_files(dir_.path()));
}

TEST_F(Files, MetadataHeadersBecomeXattrs) {
  auto h = multipart_head();
  h.headers["x-metadata-owner"] = "alice";
  FakeExchange ex(h, part("file", p("meta.txt"), "x") + closing());
  serve_upload(ex, ctx_);
  ASSERT_EQ(ex.status(), 200) << ex.body();
  char v[16];
  ssize_t n = getxattr(p("meta.txt").c_str(), "user.e2b.owner", v, sizeof(v));
  if (n < 0 && errno == ENOTSUP) GTEST_SKIP() << "no user xattrs on the temp filesystem";
  ASSERT_EQ(n, 5);
  EXPECT_EQ(std::string(v, n), "alice");
  EXPECT_EQ(nlohmann::json::parse(ex.body())[0]["metadata"]["owner"], "alice");
}

// A 1 GiB upload streams through fixed buffers: the process's peak RSS grows by far less.
class GeneratedBody : public FakeExchange {
 public:
  GeneratedBody(http::RequestHead h, std::string prefix, uint64_t n, std::string suffix)
      : FakeExchange(std::move(h)), prefix_(std::move(prefix)), n_(n), suffix_(std::move(suffix)) {}
  Result<size_t> read_body(char* buf, size_t n) override {
    size_t k = 0;
    while (k < n) {
      if (pos_ < prefix_.size()) {
        buf[k++] = prefix_[pos_++];
      } else if (pos_ < prefix_.size() + n_) {
        size_t run = std::min<uint64_t>(n - k, prefix_.size() + n_ - pos_);
        std::fill_n(buf + k, run, char('A' + (pos_ >> 20) % 26));
        k += run;
        pos_ += run;
      } else if (pos_ < prefix_.size() + n_ + suffix_.size()) {
        buf[k++] = suffix_[pos_ - prefix_.size() - n_];
        ++pos_;
      } else {
        break;
      }
    }
    return k;
  }

 private:
  std::string prefix_;
  uint64_t n_;
  std::string suffix_;
  uint64_t pos_ = 0;
};

// Peak RSS since the last reset_peak_rss() (VmHWM; writing 5 to clear_refs resets it).
long peak_rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("VmHWM:")) return std::stol(line.substr(6));
  return -1;
}
bool reset_peak_rss() {
  return bool(std::ofstream("/proc/self/clear_refs") << "5");
}
long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
  return -1;
}

TEST_F(Files, OneGibUploadHasBoundedMemory) {
  const uint64_t size = 1ull << 30;
  std::string prefix = "--" + kBoundary +
                       "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + p("big") +
                       "\"\r\n\r\n";
  GeneratedBody ex(multipart_head(), prefix, size, "\r\n" + closing());
  if (!reset_peak_rss() || peak_rss_kib() < 0) GTEST_SKIP() << "cannot reset VmHWM";
  long before = rss_kib();
  auto t0 = std::chrono::steady_clock::now();
  serve_upload(ex, ctx_);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long grew_kib = peak_rss_kib() - before;
  ASSERT_EQ(ex.status(), 200) << ex.body();
  EXPECT_EQ(std::filesystem::file_size(p("big")), size);
  EXPECT_LT(grew_kib, 16 * 1024) << "peak RSS grew by " << grew_kib << " KiB";
  std::printf("1 GiB multipart upload: %.2f s (%.0f MiB/s), peak RSS +%ld KiB\n", secs, 1024 / secs,
              grew_kib);
  std::filesystem::remove(p("big"));
  // The measurement itself works: touching 32 MiB shows up in the peak.
  std::vector<char> touch(32u << 20, 1);
  EXPECT_GE(peak_rss_kib() - before, 30 * 1024) << touch[12345];
}

// No space: a 64 KiB tmpfs in a mount namespace of a forked child (gone when the child exits).
TEST_F(Files, NoSpaceIs507AndLeavesNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a private tmpfs";
  std::string mnt = p("small");
  mkdir(mnt.c_str(), 0755);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0) _exit(77);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(77);
    if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) _exit(77);
    FakeExchange ex(multipart_head(),
                    part("file", mnt + "/big", std::string(1 << 20, 'x')) + closing());
    serve_upload(ex, ctx_);
    if (ex.status() != 507) _exit(1);
    if (ex.body().find("not enough disk space") == std::string::npos) _exit(2);
    for (auto& e : std::filesystem::directory_iterator(mnt)) (void)e, _exit(3);  // nothing left
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot mount a private tmpfs here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: status not 507, 2: message, 3: a file was left";
}

class FilesAsUser : public Files {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
    mkdir(p("home").c_str(), 0755);
    ASSERT_EQ(chown(p("home").c_str(), kNobody, kNobody), 0);
    user_ctx_ = FilesContext{UnixUser{"nobody", kNobody, kNobody, {}, p("home"), "/bin/sh"}, ""};
  }
  FilesContext user_ctx_;
};

TEST_F(FilesAsUser, OwnershipAndPermissions) {
  FakeExchange ex(multipart_head(), part("file", "sub/f.txt", "mine") + closing());
  serve_upload(ex, user_ctx_);
  ASSERT_EQ(ex.status(), 200) << ex.body();
  struct stat st {};
  ASSERT_EQ(stat(p("home/sub/f.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_EQ(st.st_gid, kNobody);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(stat(p("home/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_EQ(st.st_mode & 0777, 0755u);

  FakeExchange root_ex(multipart_head(), part("file", p("rootfile"), "r") + closing());
  serve_upload(root_ex, ctx_);
  ASSERT_EQ(stat(p("rootfile").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);

  FakeExchange denied(multipart_head(), part("file", p("not-mine.txt"), "x") + closing());
  serve_upload(denied, user_ctx_);
  EXPECT_EQ(denied.status(), 403) << denied.body();
  chmod(p("rootfile").c_str(), 0600);
  FakeExchange unreadable(head("GET", {{"path", p("rootfile")}}));
  serve_download(unreadable, user_ctx_);
  EXPECT_EQ(unreadable.status(), 403);
}

TEST_F(Files, HandleFilesAuth) {
  if (getuid() != 0) GTEST_SKIP() << "requests act as root";
  AgentState state;
  InitSettings s;
  s.access_token = "tok";
  ASSERT_TRUE(state.apply_init(s));
  std::ofstream(p("s.txt")) << "signed";
  auto h = head("GET", {{"path", p("s.txt")}, {"username", "root"}});
  {
    FakeExchange ex(h);
    ASSERT_TRUE(handle_files(ex, state));
    EXPECT_EQ(ex.status(), 401);
  }
  {
    auto hh = h;
    hh.headers["x-access-token"] = "tok";
    FakeExchange ex(hh);
    handle_files(ex, state);
    EXPECT_EQ(ex.status(), 200);
    EXPECT_EQ(ex.body(), "signed");
  }
  int64_t future = std::time(nullptr) + 60;
  {
    auto hs = h;
    hs.query["signature"] = file_signature(p("s.txt"), FileOp::kRead, "root", "tok", future);
    hs.query["signature_expiration"] = std::to_string(future);
    FakeExchange ex(hs);
    handle_files(ex, state);
    EXPECT_EQ(ex.status(), 200);
    hs.method = "POST";  // a read signature does not allow writing
    FakeExchange w(hs, "x");
    handle_files(w, state);
    EXPECT_EQ(w.status(), 401);
  }
  {
    auto he = h;
    he.query["signature"] = file_signature(p("s.txt"), FileOp::kRead, "root", "tok", 1000);
    he.query["signature_expiration"] = "1000";
    FakeExchange ex(he);
    handle_files(ex, state);
    EXPECT_EQ(ex.status(), 401);
    EXPECT_NE(ex.body().find("expired"), std::string::npos);
  }
  http::RequestHead other = h;
  other.path = "/filesx";
  FakeExchange ex(other);
  EXPECT_FALSE(handle_files(ex, state));
  auto del = h;
  del.method = "DELETE";
  del.headers["x-access-token"] = "tok";
  FakeExchange d(del);
  handle_files(d, state);
  EXPECT_EQ(d.status(), 405);
}

TEST(FilesHelpers, AcceptEncodingAndDisposition) {
  EXPECT_TRUE(accepts_gzip("gzip, deflate"));
  EXPECT_TRUE(accepts_gzip("deflate, GZIP;q=0.5"));
  EXPECT_TRUE(accepts_gzip("*"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("deflate"));
  EXPECT_FALSE(accepts_gzip("*;q=0"));
  EXPECT_FALSE(accepts_gzip(""));
  EXPECT_TRUE(gzip_requested("gzip"));
  EXPECT_TRUE(gzip_requested("gzip, identity"));
  EXPECT_FALSE(gzip_requested("gzip, deflate"));  // node fetch's default, not the caller's wish
  EXPECT_FALSE(gzip_requested("gzip;q=0"));
  EXPECT_FALSE(gzip_requested("*"));
  EXPECT_EQ(content_disposition("a.txt"), "inline; filename=a.txt");
  EXPECT_EQ(content_disposition("a \"b\".txt"), "inline; filename=\"a \\\"b\\\".txt\"");
  EXPECT_EQ(content_disposition("\xc3\xa9.txt"), "inline; filename*=utf-8''%C3%A9.txt");
}

}  // namespace
}  // namespace cordon::agent::files
