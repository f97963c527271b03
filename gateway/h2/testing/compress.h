// Test-only: bodies compressed the way an upstream sends them (Content-Encoding gzip or
// deflate), for the fake h2 upstream and the scrubber tests.
#pragma once

#include <string>
#include <string_view>

namespace cordon::gateway::h2::testing {

// `plain` deflated in one go: window_bits 15 + 16 = gzip, 15 = zlib ("deflate"), -15 = raw
// deflate; `level` 1-9. "" if zlib refused.
std::string compress(std::string_view plain, int window_bits, int level = 6);

}  // namespace cordon::gateway::h2::testing
