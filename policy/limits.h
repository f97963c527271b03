// Limits of the policy module. All are hard limits: input beyond them is refused, never
// truncated. Units are in the names.
#pragma once

#include <cstddef>

namespace cordon::policy {

// A request target (path + query) longer than this is refused by canonicalize_target. The
// gateway's header limit is the first line of defence; this keeps the canonicalizer bounded
// on its own (it is also fed by the fuzzer and the CLI).
inline constexpr std::size_t kMaxTargetBytes = 16 * 1024;

// Rules files: big enough for 100,000 destinations, small enough to refuse a runaway file.
inline constexpr std::size_t kMaxRulesFileBytes = 64 * 1024 * 1024;

// DNS limits on host names (RFC 1035): whole name and one label.
inline constexpr std::size_t kMaxHostBytes = 253;
inline constexpr std::size_t kMaxLabelBytes = 63;

// Lint stops collecting after this many errors (the file is rejected either way); a file
// with thousands of errors is not made clearer by printing all of them.
inline constexpr std::size_t kMaxLintErrors = 1000;

// Glob patterns: wildcards per pattern, to keep matching cost bounded.
inline constexpr std::size_t kMaxGlobWildcards = 8;

// Format strings and secret names of credentials.
inline constexpr std::size_t kMaxFormatBytes = 1024;
inline constexpr std::size_t kMaxSecretNameBytes = 128;

}  // namespace cordon::policy
