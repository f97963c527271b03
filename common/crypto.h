// Thin, allocation-light wrappers over OpenSSL primitives that several libraries share.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon {

// n bytes from the OpenSSL CSPRNG; aborts the process if the CSPRNG fails (it cannot be
// trusted to continue without randomness).
std::string random_bytes(size_t n);

// Raw 32-byte digests.
std::string sha256(std::string_view data);
std::string hmac_sha256(std::string_view key, std::string_view data);

}  // namespace cordon
