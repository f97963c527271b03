#include "agent/files/signature.h"

// SHA256() is the self-contained digest (no provider machinery, so a static link stays small);
// OpenSSL 3 marks it deprecated in favour of EVP, which would pull in the provider framework.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include <charconv>

#include "common/encoding.h"

namespace cordon::agent::files {

std::string file_signature(std::string_view path, FileOp op, std::string_view username,
                           std::string_view token, std::optional<int64_t> expiration) {
  std::string msg;
  msg.append(path).append(":").append(op == FileOp::kRead ? "read" : "write").append(":");
  msg.append(username).append(":").append(token);
  if (expiration) msg.append(":").append(std::to_string(*expiration));
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), digest);
  std::string b64 =
      base64_encode(std::string_view(reinterpret_cast<char*>(digest), sizeof(digest)));
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return "v1_" + b64;
}

Status check_file_access(const SignedRequest& req, const std::optional<std::string>& token,
                         FileOp op, int64_t now_unix) {
  if (!token) return {};
  if (req.header_token && !req.header_token->empty()) {
    if (!constant_time_equal(*req.header_token, *token))
      return fail("access token present in header but does not match");
    return {};
  }
  if (!req.signature) return fail("missing signature query parameter");
  std::optional<int64_t> exp;
  if (req.expiration) {
    int64_t v = 0;
    const char* b = req.expiration->data();
    const char* e = b + req.expiration->size();
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || p != e || req.expiration->empty())
      return fail("signature_expiration '" + *req.expiration + "' is not a unix time");
    exp = v;
  }
  std::string expected = file_signature(req.path, op, req.username, *token, exp);
  if (!constant_time_equal(expected, *req.signature)) return fail("invalid signature");
  if (exp && *exp < now_unix) return fail("signature is already expired");
  return {};
}

}  // namespace cordon::agent::files
