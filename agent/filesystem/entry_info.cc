#include "agent/filesystem/entry_info.h"

#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "agent/filesystem/limits.h"
#include "agent/filesystem/paths.h"

namespace cordon::agent::filesystem {
namespace {

constexpr std::string_view kXattrPrefix = "user.e2b.";

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

pb::FileType file_type(mode_t m) {
  if (S_ISREG(m)) return pb::FILE_TYPE_FILE;
  if (S_ISDIR(m)) return pb::FILE_TYPE_DIRECTORY;
  if (S_ISLNK(m)) return pb::FILE_TYPE_SYMLINK;
  return pb::FILE_TYPE_UNSPECIFIED;  // devices, fifos, sockets: the SDK's list() drops them
}

}  // namespace

std::string go_mode_string(mode_t m) {
  // Go's FileMode bits, in the order of its "dalTLDpSugct?" string.
  const bool bits[] = {
      S_ISDIR(m),                // d
      false,                     // a (append-only: not in st_mode)
      false,                     // l (exclusive)
      false,                     // T (temporary)
      S_ISLNK(m),                // L
      S_ISBLK(m) || S_ISCHR(m),  // D
      S_ISFIFO(m),               // p
      S_ISSOCK(m),               // S
      (m & S_ISUID) != 0,        // u
      (m & S_ISGID) != 0,        // g
      S_ISCHR(m),                // c
      (m & S_ISVTX) != 0,        // t
      false,                     // ? (irregular)
  };
  constexpr char kLetters[] = "dalTLDpSugct?";
  std::string out;
  for (size_t i = 0; i < sizeof(bits); ++i)
    if (bits[i]) out += kLetters[i];
  if (out.empty()) out = "-";
  constexpr char kRwx[] = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) out += (m & (1u << (8 - i))) ? kRwx[i] : '-';
  return out;
}

void NameCache::load(const std::string& file, std::unordered_map<uint32_t, std::string>& out) {
  std::FILE* f = std::fopen(file.c_str(), "re");
  if (!f) return;
  char line[4096];
  size_t total = 0;
  while (out.size() < kMaxEntries && std::fgets(line, sizeof(line), f)) {
    total += std::strlen(line);
    if (total > kMaxFileBytes) break;
    // name:password:id:...
    std::string_view l(line);
    size_t c1 = l.find(':');
    size_t c2 = c1 == std::string_view::npos ? c1 : l.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    size_t c3 = l.find_first_of(":\n", c2 + 1);
    std::string_view id = l.substr(c2 + 1, c3 == std::string_view::npos ? c3 : c3 - c2 - 1);
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(id.data(), id.data() + id.size(), v);
    if (ec != std::errc() || p != id.data() + id.size() || id.empty()) continue;
    out.emplace(v, std::string(l.substr(0, c1)));  // first entry for an id wins, as getpwuid
  }
  std::fclose(f);
}

std::string NameCache::user(uid_t uid) {
  if (!users_loaded_) {
    load(passwd_file_, users_);
    users_loaded_ = true;
  }
  auto it = users_.find(uid);
  return it != users_.end() ? it->second : std::to_string(uid);
}

std::string NameCache::group(gid_t gid) {
  if (!groups_loaded_) {
    load(group_file_, groups_);
    groups_loaded_ = true;
  }
  auto it = groups_.find(gid);
  return it != groups_.end() ? it->second : std::to_string(gid);
}

Result<pb::EntryInfo> stat_entry(const std::string& path, NameCache& names) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    int err = errno;
    return fail("stat '" + path + "'", err);
  }
  pb::EntryInfo e;
  e.set_name(base_name(path));
  e.set_path(path);
  e.set_type(file_type(st.st_mode));
  e.set_size(st.st_size);
  e.set_mode(st.st_mode & 0777);
  e.set_permissions(go_mode_string(st.st_mode));
  e.set_owner(names.user(st.st_uid));
  e.set_group(names.group(st.st_gid));
  e.mutable_modified_time()->set_seconds(st.st_mtim.tv_sec);
  e.mutable_modified_time()->set_nanos(static_cast<int32_t>(st.st_mtim.tv_nsec));
  if (S_ISLNK(st.st_mode)) {
    // envd reports the fully resolved target, and the target's permission bits as `mode`.
    char resolved[PATH_MAX];
    struct stat target {};
    if (realpath(path.c_str(), resolved) != nullptr && stat(resolved, &target) == 0) {
      e.set_symlink_target(resolved);
      e.set_mode(target.st_mode & 0777);
    } else {
      char link[PATH_MAX];
      ssize_t n = readlink(path.c_str(), link, sizeof(link));
      e.set_symlink_target(n > 0 ? std::string(link, n) : path);
      e.set_mode(0);
    }
  }
  for (auto& [k, v] : read_metadata(path)) (*e.mutable_metadata())[k] = v;
  return e;
}

std::map<std::string, std::string> read_metadata(const std::string& path) {
  std::map<std::string, std::string> out;
  std::vector<char> names(4096);
  ssize_t n = listxattr(path.c_str(), names.data(), names.size());
  if (n < 0 && errno == ERANGE) {
    ssize_t need = listxattr(path.c_str(), nullptr, 0);
    if (need <= 0 || static_cast<size_t>(need) > kMaxXattrListBytes) return out;
    names.resize(need);
    n = listxattr(path.c_str(), names.data(), names.size());
  }
  if (n <= 0) return out;
  std::string_view all(names.data(), n);
  size_t total = 0;
  while (!all.empty()) {
    size_t z = all.find('\0');
    std::string_view name = all.substr(0, z);
    all.remove_prefix(z == std::string_view::npos ? all.size() : z + 1);
    if (!name.starts_with(kXattrPrefix)) continue;
    std::string key(name.substr(kXattrPrefix.size()));
    char value[kMaxMetadataTotalBytes];
    ssize_t vn = getxattr(path.c_str(), std::string(name).c_str(), value, sizeof(value));
    if (vn < 0) continue;
    std::string v(value, vn);
    if (!valid_utf8(key) || !valid_utf8(v)) continue;
    total += key.size() + v.size();
    if (total > kMaxXattrListBytes) break;
    out.emplace(std::move(key), std::move(v));
  }
  return out;
}

Status validate_metadata(const std::map<std::string, std::string>& metadata) {
  size_t total = 0;
  for (auto& [k, v] : metadata) {
    if (k.empty()) return fail("metadata key must not be empty");
    if (k.size() > 255 - kXattrPrefix.size())
      return fail("metadata key '" + k + "' exceeds " + std::to_string(255 - kXattrPrefix.size()) +
                  " bytes");
    for (std::string_view s : {std::string_view(k), std::string_view(v)})
      for (unsigned char c : s)
        if (c < 0x20 || c > 0x7e)
          return fail("metadata '" + k + "' contains a byte that is not printable ASCII");
    total += kXattrPrefix.size() + k.size() + v.size();
  }
  if (total > kMaxMetadataTotalBytes)
    return fail("total metadata size " + std::to_string(total) + " exceeds " +
                std::to_string(kMaxMetadataTotalBytes) + " bytes");
  return {};
}

Status write_metadata(int fd, const std::map<std::string, std::string>& metadata) {
  if (auto s = validate_metadata(metadata); !s) return s;
  // Drop keys of an earlier upload that this one does not carry (xattrs survive overwrite).
  std::vector<char> names(kMaxXattrListBytes);
  ssize_t n = flistxattr(fd, names.data(), names.size());
  if (n < 0) {
    if (errno == ENOTSUP) return {};
    return fail("listing xattrs", errno);
  }
  std::string_view all(names.data(), n);
  while (!all.empty()) {
    size_t z = all.find('\0');
    std::string name(all.substr(0, z));
    all.remove_prefix(z == std::string_view::npos ? all.size() : z + 1);
    if (!std::string_view(name).starts_with(kXattrPrefix)) continue;
    if (metadata.count(name.substr(kXattrPrefix.size()))) continue;
    if (fremovexattr(fd, name.c_str()) != 0 && errno != ENODATA)
      return fail("removing xattr " + name, errno);
  }
  for (auto& [k, v] : metadata) {
    std::string name = std::string(kXattrPrefix) + k;
    if (fsetxattr(fd, name.c_str(), v.data(), v.size(), 0) != 0) {
      if (errno == ENOTSUP) return {};
      return fail("setting xattr " + name, errno);
    }
  }
  return {};
}

}  // namespace cordon::agent::filesystem
