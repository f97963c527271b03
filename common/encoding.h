// Byte encodings used across cordon: hex, base64url (no padding), constant-time comparison.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cordon {

std::string hex_encode(std::string_view bytes);
std::optional<std::string> hex_decode(std::string_view hex);

// RFC 4648 §5 alphabet, no padding.
std::string base64url_encode(std::string_view bytes);
std::optional<std::string> base64url_decode(std::string_view text);

// Standard alphabet with padding (HTTP Basic auth).
std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);

// Compares in time that depends only on the lengths, never on where the inputs differ.
bool constant_time_equal(std::string_view a, std::string_view b);

// ASCII case-insensitive equality (HTTP header names, tokens); no locale.
bool ascii_iequals(std::string_view a, std::string_view b);

// `s` as an error message may quote it: printable ASCII kept, every other byte as \xNN, cut
// after `max` bytes with "..." (untrusted names must not put control bytes into logs).
std::string printable_excerpt(std::string_view s, size_t max = 80);

}  // namespace cordon
