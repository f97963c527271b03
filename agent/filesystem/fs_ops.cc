#include "agent/filesystem/fs_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "agent/filesystem/identity.h"
#include "agent/filesystem/limits.h"
#include "agent/filesystem/paths.h"

namespace cordon::agent::filesystem {

using connect::Code;
using connect::RpcError;

namespace {

Code errno_code(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Code::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return Code::kPermissionDenied;
    case EEXIST:
    case ENOTEMPTY:
      return Code::kAlreadyExists;
    case EINVAL:
    case ENAMETOOLONG:
    case EISDIR:
    case EXDEV:
      return Code::kInvalidArgument;
    case ELOOP:
      return Code::kFailedPrecondition;
    case ENOSPC:
    case EDQUOT:
      return Code::kResourceExhausted;
    default:
      return Code::kInternal;
  }
}

// Resolves `path` for the user; bad input → invalid_argument.
std::variant<std::string, RpcError> resolve(const FsContext& ctx, const std::string& path) {
  auto r = resolve_path(path, ctx.user, ctx.default_workdir);
  if (!r) return RpcError{Code::kInvalidArgument, r.error().message};
  return *r;
}

RpcError scope_error(const UserScope& scope) {
  return RpcError{Code::kPermissionDenied, scope.status().error().message};
}

RpcError entry_error(const Error& e) {
  return errno_error(e.code, e.message);
}

}  // namespace

RpcError errno_error(int err, const std::string& what) {
  return RpcError{errno_code(err), what + ": " + std::strerror(err)};
}

Status make_dirs(const std::string& dir) {
  std::vector<std::string> missing;
  std::string p = dir;
  for (;;) {
    struct stat st {};
    if (stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return fail("'" + p + "' is not a directory", ENOTDIR);
      break;
    }
    if (errno != ENOENT) return fail("stat '" + p + "'", errno);
    missing.push_back(p);
    if (p == "/") break;
    p = dir_name(p);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (mkdir(it->c_str(), 0755) != 0) {
      if (errno == EEXIST) continue;  // created concurrently
      return fail("mkdir '" + *it + "'", errno);
    }
    chmod(it->c_str(), 0755);  // umask-independent, as the SDK's users expect
  }
  return {};
}

connect::RpcResult<pb::StatResponse> stat(const FsContext& ctx, const pb::StatRequest& req) {
  auto path = resolve(ctx, req.path());
  if (auto* e = std::get_if<RpcError>(&path)) return *e;
  UserScope scope(ctx.user);
  if (!scope.status()) return scope_error(scope);
  NameCache names = ctx.names();
  auto entry = stat_entry(std::get<std::string>(path), names);
  if (!entry) return entry_error(entry.error());
  pb::StatResponse resp;
  *resp.mutable_entry() = std::move(*entry);
  return resp;
}

connect::RpcResult<pb::MakeDirResponse> make_dir(const FsContext& ctx,
                                                 const pb::MakeDirRequest& req) {
  auto pathv = resolve(ctx, req.path());
  if (auto* e = std::get_if<RpcError>(&pathv)) return *e;
  const std::string& path = std::get<std::string>(pathv);
  UserScope scope(ctx.user);
  if (!scope.status()) return scope_error(scope);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return RpcError{Code::kAlreadyExists, "directory already exists: " + path};
    return RpcError{Code::kInvalidArgument,
                    "path already exists but it is not a directory: " + path};
  }
  if (auto s = make_dirs(path); !s) return errno_error(s.error().code, s.error().message);
  NameCache names = ctx.names();
  auto entry = stat_entry(path, names);
  if (!entry) return entry_error(entry.error());
  pb::MakeDirResponse resp;
  *resp.mutable_entry() = std::move(*entry);
  return resp;
}

connect::RpcResult<pb::MoveResponse> move(const FsContext& ctx, const pb::MoveRequest& req) {
  auto src = resolve(ctx, req.source());
  if (auto* e = std::get_if<RpcError>(&src)) return *e;
  auto dst = resolve(ctx, req.destination());
  if (auto* e = std::get_if<RpcError>(&dst)) return *e;
  const std::string& from = std::get<std::string>(src);
  const std::string& to = std::get<std::string>(dst);
  UserScope scope(ctx.user);
  if (!scope.status()) return scope_error(scope);
  struct stat st {};
  if (lstat(from.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT) return RpcError{Code::kNotFound, "source file not found: " + from};
    return errno_error(err, "stat '" + from + "'");
  }
  if (auto s = make_dirs(dir_name(to)); !s) return errno_error(s.error().code, s.error().message);
  if (rename(from.c_str(), to.c_str()) != 0) {
    int err = errno;
    if (err == ENOENT) return RpcError{Code::kNotFound, "source file not found: " + from};
    return errno_error(err, "rename '" + from + "' to '" + to + "'");
  }
  NameCache names = ctx.names();
  auto entry = stat_entry(to, names);
  if (!entry) return entry_error(entry.error());
  pb::MoveResponse resp;
  *resp.mutable_entry() = std::move(*entry);
  return resp;
}

namespace {

struct Walker {
  explicit Walker(NameCache n) : names(std::move(n)) {}
  std::string root_real;       // where the walk happens (symlink of the root resolved)
  std::string root_requested;  // what the entries' paths start with
  uint32_t depth = 1;
  NameCache names;
  pb::ListDirResponse resp;

  // Lists `rel` (relative to the root, "" for the root) at level `level` (1 = children).
  std::optional<RpcError> walk(const std::string& rel, uint32_t level) {
    std::string dir = rel.empty() ? (root_real.empty() ? "/" : root_real) : root_real + "/" + rel;
    DIR* d = opendir(dir.c_str());
    if (!d) {
      int err = errno;
      if (rel.empty()) return errno_error(err, "opening directory '" + dir + "'");
      return std::nullopt;  // unreadable subdirectory: listed, not descended into
    }
    std::vector<std::string> children;
    while (dirent* de = readdir(d)) {
      std::string_view n = de->d_name;
      if (n == "." || n == "..") continue;
      children.emplace_back(n);
    }
    closedir(d);
    std::sort(children.begin(), children.end());
    for (auto& name : children) {
      std::string child_rel = rel.empty() ? name : rel + "/" + name;
      auto entry = stat_entry(root_real + "/" + child_rel, names);
      if (!entry) {
        if (entry.error().code == ENOENT) continue;  // removed meanwhile
        return entry_error(entry.error());
      }
      entry->set_path(root_requested == "/" ? "/" + child_rel : root_requested + "/" + child_rel);
      bool is_dir = entry->type() == pb::FILE_TYPE_DIRECTORY;
      if (static_cast<size_t>(resp.entries_size()) >= kMaxListEntries)
        return RpcError{Code::kResourceExhausted, "listing has more than " +
                                                      std::to_string(kMaxListEntries) +
                                                      " entries; use a smaller depth"};
      *resp.add_entries() = std::move(*entry);
      if (is_dir && level < depth)
        if (auto e = walk(child_rel, level + 1)) return e;
    }
    return std::nullopt;
  }
};

}  // namespace

connect::RpcResult<pb::ListDirResponse> list_dir(const FsContext& ctx,
                                                 const pb::ListDirRequest& req) {
  auto pathv = resolve(ctx, req.path());
  if (auto* e = std::get_if<RpcError>(&pathv)) return *e;
  const std::string& path = std::get<std::string>(pathv);
  UserScope scope(ctx.user);
  if (!scope.status()) return scope_error(scope);
  char real[PATH_MAX];
  if (realpath(path.c_str(), real) == nullptr) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      return RpcError{Code::kNotFound, "path not found: " + path};
    if (err == ELOOP)
      return RpcError{Code::kFailedPrecondition, "cyclic symlink or chain >40 links at " + path};
    return errno_error(err, "resolving '" + path + "'");
  }
  struct stat st {};
  if (::stat(real, &st) != 0) return errno_error(errno, "stat '" + std::string(real) + "'");
  if (!S_ISDIR(st.st_mode))
    return RpcError{Code::kInvalidArgument, "path is not a directory: " + path};
  Walker w{ctx.names()};
  w.root_real = std::string(real) == "/" ? "" : real;
  w.root_requested = path;
  w.depth = std::min(req.depth() == 0 ? 1u : req.depth(), kMaxListDepth);
  if (auto e = w.walk("", 1)) return *e;
  return std::move(w.resp);
}

connect::RpcResult<pb::RemoveResponse> remove(const FsContext& ctx, const pb::RemoveRequest& req) {
  auto pathv = resolve(ctx, req.path());
  if (auto* e = std::get_if<RpcError>(&pathv)) return *e;
  const std::string& path = std::get<std::string>(pathv);
  UserScope scope(ctx.user);
  if (!scope.status()) return scope_error(scope);
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      return RpcError{Code::kNotFound, "file or directory not found: " + path};
    return errno_error(err, "stat '" + path + "'");
  }
  if (path == "/") return RpcError{Code::kInvalidArgument, "refusing to remove /"};
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // does not follow symlinks
  if (ec) return errno_error(ec.value(), "removing '" + path + "'");
  return pb::RemoveResponse{};
}

}  // namespace cordon::agent::filesystem
