// Path resolution for filesystem and /files requests, as envd does it: an empty path means the
// default working directory (else the user's home), "~" and "~/x" expand to the home, and a
// relative path is taken relative to the home. The result is absolute and lexically clean.
#pragma once

#include <string>
#include <string_view>

#include "agent/agent_state.h"
#include "common/result.h"

namespace cordon::agent::filesystem {

// Fails (message naming the path) on a NUL byte, on "~other" (another user's home is not
// expanded) and when no base directory is known for a relative path.
Result<std::string> resolve_path(std::string_view path, const UnixUser& user,
                                 const std::string& default_workdir);

// Lexical clean as Go's filepath.Clean for absolute paths: no ".", "..", "//" or trailing "/".
std::string clean_absolute(std::string_view path);

// Last element of a clean absolute path ("/" for "/").
std::string base_name(std::string_view clean_path);
// Everything before the last element ("/" for "/x").
std::string dir_name(std::string_view clean_path);

}  // namespace cordon::agent::filesystem
