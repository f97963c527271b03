#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "common/crypto.h"
#include "common/encoding.h"
#include "common/file_io.h"
#include "common/result.h"
#include "common/time_format.h"

namespace cordon {
namespace {

TEST(Encoding, HexRoundTrip) {
  std::string bytes("\x00\x01\xfe\xff", 4);
  EXPECT_EQ(hex_encode(bytes), "0001feff");
  EXPECT_EQ(*hex_decode("0001FEff"), bytes);
  EXPECT_FALSE(hex_decode("0g"));
  EXPECT_FALSE(hex_decode("123"));
}

TEST(Encoding, Base64UrlRfc4648Vectors) {
  EXPECT_EQ(base64url_encode("f"), "Zg");
  EXPECT_EQ(base64url_encode("fo"), "Zm8");
  EXPECT_EQ(base64url_encode("foo"), "Zm9v");
  EXPECT_EQ(base64url_encode("\xfb\xff"), "-_8");
  EXPECT_EQ(*base64url_decode("-_8"), "\xfb\xff");
  EXPECT_FALSE(base64url_decode("Zm9v="));
  EXPECT_FALSE(base64url_decode("Zh"));  // non-canonical trailing bits
  EXPECT_EQ(base64url_encode(random_bytes(32)).size(), 43u);
}

TEST(Encoding, Base64Standard) {
  EXPECT_EQ(base64_encode("root:"), "cm9vdDo=");
  EXPECT_EQ(*base64_decode("cm9vdDo="), "root:");
  EXPECT_FALSE(base64_decode("cm9vdDo"));
}

TEST(Encoding, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
}

TEST(Crypto, Sha256KnownAnswer) {
  EXPECT_EQ(hex_encode(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_encode(hmac_sha256("key", "The quick brown fox jumps over the lazy dog")),
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8");
}

TEST(Time, FormatAndParse) {
  auto t = parse_rfc3339("2026-11-30T03:34:48.123456Z");
  ASSERT_TRUE(t);
  EXPECT_EQ(format_rfc3339_micros(*t), "2026-11-30T03:34:48.123456Z");
  EXPECT_EQ(format_rfc3339_micros(*parse_rfc3339("2026-11-30T05:34:48+02:00")),
            "2026-11-30T03:34:48.000000Z");
  EXPECT_TRUE(parse_rfc3339("2026-11-30"));
  EXPECT_FALSE(parse_rfc3339("2026-13-30"));
  EXPECT_FALSE(parse_rfc3339("yesterday"));
}

TEST(Time, Durations) {
  EXPECT_EQ(parse_duration("90s")->count(), 90);
  EXPECT_EQ(parse_duration("1h30m")->count(), 5400);
  EXPECT_EQ(parse_duration("7d")->count(), 7 * 86400);
  EXPECT_FALSE(parse_duration("10"));
  EXPECT_FALSE(parse_duration("h"));
  EXPECT_FALSE(parse_duration("5y"));
}

TEST(FileIo, PrivateFilesAreWrittenAndCheckedForMode) {
  auto dir = std::filesystem::temp_directory_path() / ("cordon-fileio-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(ensure_directory(dir.string(), 0700));
  std::string path = (dir / "k").string();
  ASSERT_TRUE(write_file_atomic(path, "secret", 0600));
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(*read_private_file(path), "secret");
  chmod(path.c_str(), 0644);
  auto r = read_private_file(path);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("0644"), std::string::npos);
  EXPECT_FALSE(read_file((dir / "missing").string()));
  std::filesystem::remove_all(dir);
}

TEST(ResultType, CarriesValueOrError) {
  auto ok = []() -> Result<int> { return 3; }();
  auto bad = []() -> Result<int> { return fail("x is wrong", 7); }();
  EXPECT_TRUE(ok);
  EXPECT_EQ(*ok, 3);
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.error().code, 7);
  Status s = with_context("loading", bad.error());
  EXPECT_EQ(s.error().message, "loading: x is wrong");
}

}  // namespace
TEST(Encoding, PrintableExcerptEscapesControlBytesAndCuts) {
  EXPECT_EQ(printable_excerpt("api.example"), "api.example");
  EXPECT_EQ(printable_excerpt(std::string("a\nb\0c\x7f", 6)), "a\\x0ab\\x00c\\x7f");
  EXPECT_EQ(printable_excerpt(std::string(100, 'x'), 10), std::string(10, 'x') + "...");
}

}  // namespace cordon
