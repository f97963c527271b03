// The unary filesystem RPCs as plain functions of (user, request) → response or RpcError, with
// no HTTP in sight: filesystem_service.cc only decodes, dispatches and encodes. Each runs its
// file operations as `ctx.user` (identity.h), so the kernel decides what the user may do.
#pragma once

#include <string>

#include "agent/agent_state.h"
#include "agent/connect/connect.h"
#include "agent/filesystem/entry_info.h"

namespace cordon::agent::filesystem {

struct FsContext {
  UnixUser user;
  std::string default_workdir;              // /init's default workdir; "" = the user's home
  std::string passwd_file = "/etc/passwd";  // for owner names in EntryInfo
  std::string group_file = "/etc/group";
  NameCache names() const { return NameCache(passwd_file, group_file); }
};

// errno → Connect code (ENOENT → not_found, EACCES → permission_denied, ...), message
// "<what>: <strerror>".
connect::RpcError errno_error(int err, const std::string& what);

connect::RpcResult<pb::StatResponse> stat(const FsContext& ctx, const pb::StatRequest& req);
// Creates the directory and its missing parents (0755, owned by the user); already_exists
// when it is a directory already, invalid_argument when it is something else.
connect::RpcResult<pb::MakeDirResponse> make_dir(const FsContext& ctx,
                                                 const pb::MakeDirRequest& req);
// rename(2); creates the destination's missing parent directories first.
connect::RpcResult<pb::MoveResponse> move(const FsContext& ctx, const pb::MoveRequest& req);
// Entries below the directory (a symlink to a directory is followed for the root only), to
// `depth` levels (0 = 1), in pre-order with names sorted, paths under the requested path.
// Subdirectories the user cannot read are listed but not descended into.
connect::RpcResult<pb::ListDirResponse> list_dir(const FsContext& ctx,
                                                 const pb::ListDirRequest& req);
// Removes a file, symlink or (recursively) a directory; not_found when it does not exist.
connect::RpcResult<pb::RemoveResponse> remove(const FsContext& ctx, const pb::RemoveRequest& req);

// mkdir -p as the calling thread's user, new directories chmod'ed to 0755 whatever the umask.
// Fails with Error.code = errno ("<dir> is not a directory" → ENOTDIR).
Status make_dirs(const std::string& dir);

}  // namespace cordon::agent::filesystem
