// Request-target canonicalization: the ONE function that both the policy and the gateway use,
// so that the path a rule was checked against is byte for byte the path sent upstream.
//
// Trust: the input comes from the sandbox (untrusted). Ambiguous input is rejected, never
// repaired: if two reasonable servers could read a target differently, we refuse it rather
// than guess which reading the upstream will use (specs/egress-threats.md item 13).
//
// Promises of canonicalize_target(target), where target is the origin-form request target
// (path and optional query; for an absolute-form target the gateway checks and strips
// "scheme://authority" first and passes the rest):
//  * The target must start with '/'. "*" (asterisk-form) and anything else is refused.
//  * Percent-escapes of unreserved characters (ALPHA DIGIT - _ ~) are decoded; every other
//    escape is kept, with its hex digits upper-cased. Never decoded twice.
//  * Refused in the path: encoded '/', '\', '.' (%2F %5C %2E), a raw '\', NUL and control
//    bytes raw or encoded (including C1 controls U+0080..U+009F), raw non-ASCII bytes (must
//    be percent-encoded), percent-encoded bytes that are not valid shortest-form UTF-8
//    (overlong, surrogates, > U+10FFFF, truncated), malformed escapes ("%4", "%zz"),
//    double encoding ("%25" followed by two hex digits), characters RFC 3986 does not allow
//    in a path (space " < > [ ] ^ ` { | }), a raw '#'.
//  * Decided for security (documented choices):
//      - "//" (an empty segment anywhere but at the end) is refused: servers disagree on
//        whether it collapses, so a prefix rule could be dodged.
//      - ';' in the path is refused: servlet containers strip ";params" from segments
//        ("/public/..;/admin" reaches "/admin" on Tomcat) while we would not.
//      - encoded '?' and '#' (%3F %23) are refused: a decoding hop would turn them into a
//        query or fragment delimiter.
//  * "." segments are removed and ".." segments resolved (RFC 3986 §5.2.4); ".." above the
//    root is refused. A trailing '/' is kept ("/a/b/.." -> "/a/").
//  * The query (after the first '?') is returned separately and verbatim (it is not part of
//    policy matching) but must not contain raw control bytes, spaces, non-ASCII bytes, '#'
//    or malformed escapes.
//  * Targets longer than kMaxTargetBytes are refused.
// The function is pure, thread-safe, allocates only for its result, and never throws.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon::policy {

enum class PathError : int {
  kNone = 0,
  kEmpty,             // empty target
  kTooLong,           // over kMaxTargetBytes
  kNotOriginForm,     // does not start with '/'
  kEncodedSlash,      // %2F
  kEncodedBackslash,  // %5C
  kEncodedDot,        // %2E
  kEncodedDelimiter,  // %3F or %23
  kDoubleEncoding,    // %25 followed by two hex digits
  kBackslash,         // raw '\'
  kControlByte,       // NUL or control byte, raw or encoded
  kBadEscape,         // '%' not followed by two hex digits
  kInvalidUtf8,       // encoded bytes that are not UTF-8
  kOverlongUtf8,      // encoded overlong UTF-8 form
  kNonAscii,          // raw byte >= 0x80
  kBadCharacter,      // character not allowed in a path (or query)
  kFragment,          // raw '#'
  kSemicolon,         // ';' path parameters
  kEmptySegment,      // "//"
  kAboveRoot,         // ".." above the root
};

// Stable snake_case name of the error, for audit lines ("encoded_slash", ...).
std::string_view path_error_name(PathError e);

struct CanonicalTarget {
  std::string path;   // starts with '/'; no '.'/'..' segments, no "//", no ';'
  std::string query;  // without the '?'; empty when there was none
  bool has_query = false;
};

// Canonicalizes an origin-form request target. On failure the Error's code is the PathError
// (as int) and its message says what was wrong and at which byte offset.
Result<CanonicalTarget> canonicalize_target(std::string_view target);

}  // namespace cordon::policy
