// Pre-signed /files URLs (e2b-compat.md §7, envd api/auth.go): when the sandbox has an access
// token, a /files request needs either that token in X-Access-Token or
//   signature = "v1_" + base64(sha256("<path>:<read|write>:<username>:<token>[:<expiration>]"))
// (standard alphabet, '=' stripped) in the query, with an unexpired signature_expiration.
// <path> and <username> are the raw query values ("" when absent), as the SDK signs them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon::agent::files {

enum class FileOp { kRead, kWrite };

std::string file_signature(std::string_view path, FileOp op, std::string_view username,
                           std::string_view token, std::optional<int64_t> expiration);

struct SignedRequest {
  std::optional<std::string> header_token;  // X-Access-Token
  std::string path;                         // ?path= ("" when absent)
  std::string username;                     // ?username= ("" when absent)
  std::optional<std::string> signature;     // ?signature=
  std::optional<std::string> expiration;    // ?signature_expiration= (unix seconds, text)
};

// Ok when no token is set, the header carries the token, or the signature is valid and not
// expired at `now_unix`. The failure message says which (it is sent to the client as 401).
Status check_file_access(const SignedRequest& req, const std::optional<std::string>& token,
                         FileOp op, int64_t now_unix);

}  // namespace cordon::agent::files
