#include "agent/files/signature.h"

#include <gtest/gtest.h>

namespace cordon::agent::files {
namespace {

// Computed with the SDK's algorithm (node: crypto.createHash('sha256')
// .update('/tmp/a.txt:read:user:tok').digest('base64') without '=').
TEST(Signature, MatchesTheSdk) {
  EXPECT_EQ(file_signature("/tmp/a.txt", FileOp::kRead, "user", "tok", std::nullopt),
            "v1_" + std::string("3wjaqcefdtC5n9s6kJckrbLTE09aVyoS7GvKfHVu6Ek"));
  EXPECT_EQ(file_signature("/tmp/a.txt", FileOp::kWrite, "", "tok", 1700000000),
            "v1_" + std::string("6ulHTKNHdfSwGBk5KuOm4bnskOnJBBEUNwVXQTDj2t0"));
}

SignedRequest signed_req(FileOp op, std::optional<int64_t> exp) {
  SignedRequest r;
  r.path = "/tmp/a.txt";
  r.username = "user";
  r.signature = file_signature(r.path, op, r.username, "secret", exp);
  if (exp) r.expiration = std::to_string(*exp);
  return r;
}

TEST(Signature, NoTokenAllowsEverything) {
  EXPECT_TRUE(check_file_access(SignedRequest{}, std::nullopt, FileOp::kRead, 0));
}

TEST(Signature, HeaderToken) {
  SignedRequest r;
  r.header_token = "secret";
  EXPECT_TRUE(check_file_access(r, std::string("secret"), FileOp::kWrite, 0));
  r.header_token = "wrong";
  auto s = check_file_access(r, std::string("secret"), FileOp::kWrite, 0);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("does not match"), std::string::npos);
}

TEST(Signature, ValidSignature) {
  EXPECT_TRUE(check_file_access(signed_req(FileOp::kRead, std::nullopt), std::string("secret"),
                                FileOp::kRead, 1000));
  EXPECT_TRUE(check_file_access(signed_req(FileOp::kWrite, 2000), std::string("secret"),
                                FileOp::kWrite, 1000));
}

TEST(Signature, WrongOperationPathUserOrToken) {
  const std::optional<std::string> tok = "secret";
  EXPECT_FALSE(check_file_access(signed_req(FileOp::kRead, std::nullopt), tok, FileOp::kWrite, 0));
  auto r = signed_req(FileOp::kRead, std::nullopt);
  r.path = "/tmp/b.txt";
  EXPECT_FALSE(check_file_access(r, tok, FileOp::kRead, 0));
  r = signed_req(FileOp::kRead, std::nullopt);
  r.username = "root";
  EXPECT_FALSE(check_file_access(r, tok, FileOp::kRead, 0));
  EXPECT_FALSE(check_file_access(signed_req(FileOp::kRead, std::nullopt), std::string("other"),
                                 FileOp::kRead, 0));
}

TEST(Signature, ExpiredOrTamperedExpiration) {
  const std::optional<std::string> tok = "secret";
  auto s = check_file_access(signed_req(FileOp::kRead, 999), tok, FileOp::kRead, 1000);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("expired"), std::string::npos);
  auto r = signed_req(FileOp::kRead, 999);
  r.expiration = "99999";  // extended by the holder: the signature no longer matches
  EXPECT_FALSE(check_file_access(r, tok, FileOp::kRead, 1000));
  r.expiration = "12x";
  EXPECT_FALSE(check_file_access(r, tok, FileOp::kRead, 0));
}

TEST(Signature, MissingSignature) {
  auto s = check_file_access(SignedRequest{}, std::string("secret"), FileOp::kRead, 0);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("missing signature"), std::string::npos);
}

}  // namespace
}  // namespace cordon::agent::files
