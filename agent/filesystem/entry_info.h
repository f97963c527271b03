// EntryInfo of a path, formatted exactly as envd does (e2b-compat.md §6): mode = permission
// bits, permissions = Go's FileMode string, owner/group names, modification time, size, the
// resolved target of a symlink, and the user.e2b.* xattr metadata.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <map>
#include <string>
#include <unordered_map>

#include "agent/filesystem/filesystem.pb.h"
#include "common/result.h"

namespace cordon::agent::filesystem {

namespace pb = ::filesystem;

// Go's os.FileMode(...).String() for a Linux st_mode: type letters from "dalTLDpSugct?"
// ("-" when none), then rwxrwxrwx. /tmp → "dtrwxrwxrwx", /dev/null → "Dcrw-rw-rw-".
std::string go_mode_string(mode_t st_mode);

// uid/gid → name from the sandbox's passwd and group files (read once, on the first lookup;
// numeric when unknown). Not NSS: the agent answers from the same files it takes users from.
class NameCache {
 public:
  explicit NameCache(std::string passwd_file = "/etc/passwd", std::string group_file = "/etc/group")
      : passwd_file_(std::move(passwd_file)), group_file_(std::move(group_file)) {}
  std::string user(uid_t uid);
  std::string group(gid_t gid);

 private:
  // Bounds what a huge or hostile passwd file can make us hold.
  static constexpr size_t kMaxEntries = 65536;
  static constexpr size_t kMaxFileBytes = 4 << 20;
  static void load(const std::string& file, std::unordered_map<uint32_t, std::string>& out);
  std::string passwd_file_, group_file_;
  bool users_loaded_ = false, groups_loaded_ = false;
  std::unordered_map<uint32_t, std::string> users_;
  std::unordered_map<uint32_t, std::string> groups_;
};

// Stats `path` without following a final symlink (a symlink is reported as FILE_TYPE_SYMLINK,
// with symlink_target = the fully resolved target, or the link text when it dangles; mode =
// the target's permission bits). Fails with Error.code = errno.
Result<pb::EntryInfo> stat_entry(const std::string& path, NameCache& names);

// user.e2b.<key> xattrs of `path` (following symlinks), prefix stripped; empty when the
// filesystem has none or does not support xattrs. Values that are not UTF-8 are skipped.
std::map<std::string, std::string> read_metadata(const std::string& path);

// Validates metadata as envd does (printable ASCII, key ≤ 246 bytes, total ≤ 4 KiB).
Status validate_metadata(const std::map<std::string, std::string>& metadata);
// Replaces the user.e2b.* xattrs of an open file with `metadata`. ENOTSUP is not an error (the
// filesystem cannot store them); other failures carry errno in Error.code.
Status write_metadata(int fd, const std::map<std::string, std::string>& metadata);

}  // namespace cordon::agent::filesystem
