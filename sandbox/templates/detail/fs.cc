#include "sandbox/templates/detail/fs.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "common/encoding.h"
#include "sandbox/templates/template_store.h"

namespace cordon::sandbox::detail {
namespace fs = std::filesystem;
namespace {

std::string errno_text(int e) {
  return std::strerror(e);
}

// Mount points in /proc/self/mountinfo are octal-escaped (\040 for a space).
std::string unescape_mount_path(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        char c = s[i + k];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out += char(v);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::vector<std::string> mounts_below(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::vector<std::string> found;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string id, parent, devno, root, mount_point;
    if (!(words >> id >> parent >> devno >> root >> mount_point)) continue;
    std::string mp = unescape_mount_path(mount_point);
    if (mp == dir ||
        (mp.size() > dir.size() && mp.compare(0, dir.size(), dir) == 0 && mp[dir.size()] == '/'))
      found.push_back(mp);
  }
  // Deepest first.
  std::sort(found.begin(), found.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return found;
}

thread_local std::string* walk_error = nullptr;

int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  int rc = (type == FTW_DP || type == FTW_DNR || type == FTW_D) ? ::rmdir(path) : ::unlink(path);
  if (rc != 0 && errno != ENOENT && walk_error && walk_error->empty())
    *walk_error = std::string(path) + ": " + errno_text(errno);
  return 0;  // keep going: remove as much as possible
}

thread_local DiskUsage* usage_acc = nullptr;
thread_local std::set<std::pair<dev_t, ino_t>>* seen_links = nullptr;

int count_entry(const char*, const struct stat* st, int, struct FTW*) {
  ++usage_acc->inodes;
  if (!S_ISDIR(st->st_mode) && st->st_nlink > 1 &&
      !seen_links->insert({st->st_dev, st->st_ino}).second)
    return 0;
  usage_acc->bytes += uint64_t(st->st_blocks) * 512;
  return 0;
}

struct MdFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

}  // namespace

Status remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return fail("removing " + path + ": " + errno_text(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return fail("removing " + path + ": " + errno_text(errno));
    return {};
  }
  std::error_code ec;
  std::string canon = fs::canonical(path, ec).string();
  if (ec) return fail("removing " + path + ": " + ec.message());
  for (const auto& mp : mounts_below(canon))
    if (::umount2(mp.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
      return fail("removing " + path + ": cannot unmount " + mp + ": " + errno_text(errno));
  std::string error;
  walk_error = &error;
  int rc = ::nftw(canon.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  walk_error = nullptr;
  if (rc != 0 && error.empty()) error = canon + ": " + errno_text(errno);
  if (!error.empty()) return fail("removing " + path + ": " + error);
  return {};
}

Result<std::string> hash_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail("reading " + path + ": " + errno_text(errno));
  std::unique_ptr<EVP_MD_CTX, MdFree> ctx(EVP_MD_CTX_new());
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return fail("reading " + path + ": " + errno_text(e));
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), size_t(n));
  }
  ::close(fd);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return hex_encode(std::string(reinterpret_cast<char*>(md), len));
}

Result<std::string> hash_tree(const std::string& path) {
  // Bound on entries hashed: a --file tree is the operator's, but a mistaken "/" must end.
  constexpr size_t kMaxEntries = 1'000'000;
  std::error_code ec;
  auto top = fs::symlink_status(path, ec);
  if (ec || !fs::exists(top)) return fail(path + ": no such file or directory");
  auto describe = [](const fs::path& p, const fs::file_status& s,
                     const std::string& rel) -> Result<std::string> {
    std::string perms = std::to_string(int(s.permissions()) & 07777);
    if (fs::is_symlink(s)) {
      std::error_code e;
      return "l " + rel + " " + fs::read_symlink(p, e).string() + "\n";
    }
    if (fs::is_directory(s)) return "d " + rel + " " + perms + "\n";
    if (fs::is_regular_file(s)) {
      auto h = hash_file(p.string());
      if (!h) return fail(h.error());
      return "f " + rel + " " + perms + " " + *h + "\n";
    }
    return fail(p.string() + ": not a regular file, directory or symlink");
  };
  auto first = describe(path, top, ".");
  if (!first) return fail(first.error());
  std::string text = *first;
  if (fs::is_directory(top)) {
    std::vector<std::pair<std::string, fs::path>> entries;
    for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
      entries.emplace_back(fs::relative(it->path(), path).string(), it->path());
      if (entries.size() > kMaxEntries)
        return fail(path + ": more than " + std::to_string(kMaxEntries) + " entries");
    }
    if (ec) return fail(path + ": " + ec.message());
    std::sort(entries.begin(), entries.end());
    for (const auto& [rel, p] : entries) {
      auto d = describe(p, fs::symlink_status(p), rel);
      if (!d) return fail(d.error());
      text += *d;
    }
  }
  return hex_encode(sha256(text));
}

Result<DiskUsage> disk_usage(const std::string& path) {
  DiskUsage usage;
  std::set<std::pair<dev_t, ino_t>> seen;
  usage_acc = &usage;
  seen_links = &seen;
  int rc = ::nftw(path.c_str(), count_entry, 32, FTW_PHYS | FTW_MOUNT);
  usage_acc = nullptr;
  seen_links = nullptr;
  if (rc != 0) return fail("measuring " + path + ": " + errno_text(errno));
  return usage;
}

Status set_alias(const std::string& aliases_dir, const std::string& alias, const std::string& id) {
  std::string tmp = aliases_dir + "/.tmp-" + alias + "-" + random_suffix();
  if (::symlink(("../" + id).c_str(), tmp.c_str()) != 0)
    return fail("creating alias " + tmp + ": " + errno_text(errno));
  if (::rename(tmp.c_str(), (aliases_dir + "/" + alias).c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return fail("replacing alias " + aliases_dir + "/" + alias + ": " + errno_text(e));
  }
  return {};
}

std::optional<std::string> read_alias(const std::string& aliases_dir, const std::string& alias) {
  char buf[256];
  ssize_t n = ::readlink((aliases_dir + "/" + alias).c_str(), buf, sizeof buf - 1);
  if (n <= 3) return std::nullopt;
  std::string target(buf, size_t(n));
  if (target.compare(0, 3, "../") != 0) return std::nullopt;
  return target.substr(3);
}

namespace {
Result<int> open_lock(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return fail("opening lock " + path + ": " + errno_text(errno));
  return fd;
}
}  // namespace

Result<FileLock> FileLock::acquire(const std::string& path, Mode mode,
                                   const std::atomic<bool>* cancel,
                                   const std::function<void()>& on_wait) {
  auto fd = open_lock(path);
  if (!fd) return fail(fd.error());
  int op = (mode == Mode::kShared ? LOCK_SH : LOCK_EX) | LOCK_NB;
  bool told = false;
  while (::flock(*fd, op) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      int e = errno;
      ::close(*fd);
      return fail("locking " + path + ": " + errno_text(e));
    }
    if (!told && on_wait) on_wait();
    told = true;
    if (cancel && cancel->load()) {
      ::close(*fd);
      return fail("cancelled while waiting for " + path, int(TemplateError::kCancelled));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return FileLock(*fd);
}

Result<std::optional<FileLock>> FileLock::try_acquire(const std::string& path, Mode mode) {
  auto fd = open_lock(path);
  if (!fd) return fail(fd.error());
  if (::flock(*fd, (mode == Mode::kShared ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
    int e = errno;
    ::close(*fd);
    if (e == EWOULDBLOCK) return std::optional<FileLock>{};
    return fail("locking " + path + ": " + errno_text(e));
  }
  return std::optional<FileLock>(FileLock(*fd));
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::string random_suffix() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string bytes = random_bytes(12);
  std::string out;
  for (unsigned char b : bytes) out += kChars[b % 36];
  return out;
}

}  // namespace cordon::sandbox::detail
