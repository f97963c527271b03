// GET and POST /files (e2b-compat.md §7): download and upload of files as the request's user.
//
// GET streams the file in 64 KiB pieces (gzip-compressed on the fly when Accept-Encoding allows
// it). POST takes multipart/form-data (one file per `file` part, the part's filename being the
// full destination path unless ?path= is given) or application/octet-stream (?path= required),
// either optionally Content-Encoding: gzip, and answers [{"path","name","type":"file"}].
// X-Metadata-<key> headers are stored as user.e2b.<key> xattrs, as envd does.
// Errors: JSON {"code","message"} with 400 (bad input, a directory), 401 (token or signature,
// unknown user), 403 (permission), 404 (missing), 507 (no space), 500.
#pragma once

#include <string>

#include "agent/agent_state.h"
#include "agent/http/exchange.h"

namespace cordon::agent::files {

// Serves GET/POST /files (any other method: 405); returns false for any other path.
bool handle_files(http::Exchange& ex, AgentState& state);

// The two operations once the request is authorised and its user known (for tests).
struct FilesContext {
  UnixUser user;
  std::string default_workdir;
};
void serve_download(http::Exchange& ex, const FilesContext& ctx);
void serve_upload(http::Exchange& ex, const FilesContext& ctx);

// Whether an Accept-Encoding value allows gzip (q > 0 for gzip, or for * without gzip listed).
bool accepts_gzip(std::string_view accept_encoding);
// Whether a download should be gzipped: gzip accepted and no other coding (identity aside)
// offered. Node's fetch, which the SDK uses, sends "gzip, deflate" on every request whatever
// the caller asked; the SDK's `gzip: true` sends exactly "gzip". Compressing fetch's default
// would cost the agent's CPU and cut a download to a fifth of its speed for no one's benefit.
bool gzip_requested(std::string_view accept_encoding);

// Go's mime.FormatMediaType("inline", {"filename": name}).
std::string content_disposition(std::string_view filename);

}  // namespace cordon::agent::files
