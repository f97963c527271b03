// Table-driven tests of canonicalize_target: every row is one target and either its
// canonical (path, query) or the error it must be refused with.
#include "policy/path.h"

#include <gtest/gtest.h>

#include <string>

#include "policy/limits.h"

namespace cordon::policy {
namespace {

struct Case {
  std::string target;
  PathError error;    // kNone: accepted
  std::string path;   // expected canonical path when accepted
  std::string query;  // expected query when accepted
};

const Case kCases[] = {
    // Plain and normalized forms.
    {"/", PathError::kNone, "/", ""},
    {"/a/b/c", PathError::kNone, "/a/b/c", ""},
    {"/a/b/", PathError::kNone, "/a/b/", ""},
    {"/a/./b", PathError::kNone, "/a/b", ""},
    {"/a/b/.", PathError::kNone, "/a/b/", ""},
    {"/a/b/..", PathError::kNone, "/a/", ""},
    {"/a/b/../c", PathError::kNone, "/a/c", ""},
    {"/a/../../", PathError::kAboveRoot, "", ""},
    {"/a/b/../../c/./d/", PathError::kNone, "/c/d/", ""},
    {"/./", PathError::kNone, "/", ""},
    {"/.", PathError::kNone, "/", ""},
    {"/..", PathError::kAboveRoot, "", ""},
    {"/../etc/passwd", PathError::kAboveRoot, "", ""},
    {"/a/...", PathError::kNone, "/a/...", ""},
    {"/a/..b/.c", PathError::kNone, "/a/..b/.c", ""},
    // Percent-decoding: unreserved only, other escapes kept upper-case.
    {"/%41%62%7e%2D%5f", PathError::kNone, "/Ab~-_", ""},
    {"/a%20b", PathError::kNone, "/a%20b", ""},
    {"/a%3ab", PathError::kNone, "/a%3Ab", ""},
    {"/caf%c3%a9", PathError::kNone, "/caf%C3%A9", ""},
    {"/%e2%82%ac/%f0%9f%98%80", PathError::kNone, "/%E2%82%AC/%F0%9F%98%80", ""},
    {"/a%3Bb", PathError::kNone, "/a%3Bb", ""},
    {"/a%25", PathError::kNone, "/a%25", ""},
    {"/a:b@c!$&'()*+,=", PathError::kNone, "/a:b@c!$&'()*+,=", ""},
    // Query handling.
    {"/search?q=a+b&x=%2F", PathError::kNone, "/search", "q=a+b&x=%2F"},
    {"/a/../b?x=1?y=2", PathError::kNone, "/b", "x=1?y=2"},
    {"/items?filter[name]=x", PathError::kNone, "/items", "filter[name]=x"},
    {"/?", PathError::kNone, "/", ""},
    {"/a?x#frag", PathError::kFragment, "", ""},
    {"/a?x=\x01", PathError::kControlByte, "", ""},
    {"/a?x= y", PathError::kBadCharacter, "", ""},
    {"/a?x=%zz", PathError::kBadEscape, "", ""},
    {"/a?x=\xc3\xa9", PathError::kNonAscii, "", ""},
    // Encoded separators and dots: refused, never decoded.
    {"/a%2fb", PathError::kEncodedSlash, "", ""},
    {"/a%2Fb", PathError::kEncodedSlash, "", ""},
    {"/a/..%2f..%2fetc", PathError::kEncodedSlash, "", ""},
    {"/a%5cb", PathError::kEncodedBackslash, "", ""},
    {"/%2e%2e/etc", PathError::kEncodedDot, "", ""},
    {"/a/%2E", PathError::kEncodedDot, "", ""},
    {"/.%2e/", PathError::kEncodedDot, "", ""},
    {"/a%3fb", PathError::kEncodedDelimiter, "", ""},
    {"/a%23b", PathError::kEncodedDelimiter, "", ""},
    {"/a%252fb", PathError::kDoubleEncoding, "", ""},
    {"/a%252e%252e", PathError::kDoubleEncoding, "", ""},
    {"/%252%3252", PathError::kDoubleEncoding, "", ""},  // found by fuzz_path
    {"/%25%34%31", PathError::kDoubleEncoding, "", ""},
    // Raw bytes that servers disagree on.
    {"/a\\b", PathError::kBackslash, "", ""},
    {"/a\\..\\b", PathError::kBackslash, "", ""},
    {std::string("/a\0b", 4), PathError::kControlByte, "", ""},
    {"/a%00b", PathError::kControlByte, "", ""},
    {"/a%0d%0aX-Injected:1", PathError::kControlByte, "", ""},
    {"/a\tb", PathError::kControlByte, "", ""},
    {"/a\x7f", PathError::kControlByte, "", ""},
    {"/a%7f", PathError::kControlByte, "", ""},
    {"/a%c2%85", PathError::kControlByte, "", ""},  // NEL, a C1 control
    {"/caf\xc3\xa9", PathError::kNonAscii, "", ""},
    {"/a b", PathError::kBadCharacter, "", ""},
    {"/a<b>", PathError::kBadCharacter, "", ""},
    {"/a|b", PathError::kBadCharacter, "", ""},
    {"/a{b}", PathError::kBadCharacter, "", ""},
    {"/a\"b", PathError::kBadCharacter, "", ""},
    {"/a#frag", PathError::kFragment, "", ""},
    // Documented security choices: "//", ';' parameters.
    {"//evil.example/a", PathError::kEmptySegment, "", ""},
    {"/a//b", PathError::kEmptySegment, "", ""},
    {"/a/b//", PathError::kEmptySegment, "", ""},
    {"/a;jsessionid=1", PathError::kSemicolon, "", ""},
    {"/public/..;/admin", PathError::kSemicolon, "", ""},
    // Malformed escapes.
    {"/a%", PathError::kBadEscape, "", ""},
    {"/a%4", PathError::kBadEscape, "", ""},
    {"/a%4?x", PathError::kBadEscape, "", ""},
    {"/a%zz", PathError::kBadEscape, "", ""},
    {"/a%%41", PathError::kBadEscape, "", ""},
    // UTF-8 validity of encoded bytes.
    {"/%c0%af", PathError::kOverlongUtf8, "", ""},        // overlong '/'
    {"/%c1%9c", PathError::kOverlongUtf8, "", ""},        // overlong '\'
    {"/%e0%80%af", PathError::kOverlongUtf8, "", ""},     // 3-byte overlong '/'
    {"/%f0%80%80%af", PathError::kOverlongUtf8, "", ""},  // 4-byte overlong '/'
    {"/%ed%a0%80", PathError::kInvalidUtf8, "", ""},      // surrogate U+D800
    {"/%f4%90%80%80", PathError::kInvalidUtf8, "", ""},   // beyond U+10FFFF
    {"/%f5%80%80%80", PathError::kInvalidUtf8, "", ""},
    {"/%80", PathError::kInvalidUtf8, "", ""},     // stray continuation
    {"/%c3", PathError::kInvalidUtf8, "", ""},     // truncated
    {"/%c3%41", PathError::kInvalidUtf8, "", ""},  // bad continuation
    {"/%e2%82", PathError::kInvalidUtf8, "", ""},
    {"/%ff", PathError::kInvalidUtf8, "", ""},
    // Form of the target.
    {"", PathError::kEmpty, "", ""},
    {"*", PathError::kNotOriginForm, "", ""},
    {"a/b", PathError::kNotOriginForm, "", ""},
    {"http://example.com/a", PathError::kNotOriginForm, "", ""},
    {"?x=1", PathError::kNotOriginForm, "", ""},
};

class CanonicalizeTest : public ::testing::TestWithParam<Case> {};

TEST_P(CanonicalizeTest, Table) {
  const Case& c = GetParam();
  auto r = canonicalize_target(c.target);
  if (c.error == PathError::kNone) {
    ASSERT_TRUE(r.has_value()) << "target '" << c.target << "': " << r.error().message;
    EXPECT_EQ(r->path, c.path) << c.target;
    EXPECT_EQ(r->query, c.query) << c.target;
    // Canonical output is a fixed point.
    auto again = canonicalize_target(r->path);
    ASSERT_TRUE(again.has_value()) << r->path;
    EXPECT_EQ(again->path, r->path);
  } else {
    ASSERT_FALSE(r.has_value()) << "target '" << c.target << "' accepted as '" << r->path << "'";
    EXPECT_EQ(static_cast<PathError>(r.error().code), c.error)
        << "target '" << c.target << "': " << r.error().message;
    EXPECT_NE(r.error().message.find(std::string(path_error_name(c.error))), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, CanonicalizeTest, ::testing::ValuesIn(kCases));

TEST(Canonicalize, HasEnoughRows) {
  EXPECT_GE(std::size(kCases), 40u);
}

TEST(Canonicalize, QueryFlag) {
  auto a = canonicalize_target("/a?");
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->has_query);
  auto b = canonicalize_target("/a");
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->has_query);
}

TEST(Canonicalize, LengthLimit) {
  std::string ok = "/" + std::string(kMaxTargetBytes - 1, 'a');
  EXPECT_TRUE(canonicalize_target(ok).has_value());
  std::string too_long = ok + "a";
  auto r = canonicalize_target(too_long);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(static_cast<PathError>(r.error().code), PathError::kTooLong);
}

TEST(Canonicalize, DeepDotDotStaysInside) {
  std::string t;
  for (int i = 0; i < 100; ++i) t += "/d";
  for (int i = 0; i < 100; ++i) t += "/..";
  auto r = canonicalize_target(t);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->path, "/");
  auto over = canonicalize_target(t + "/..");
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(static_cast<PathError>(over.error().code), PathError::kAboveRoot);
}

}  // namespace
}  // namespace cordon::policy
