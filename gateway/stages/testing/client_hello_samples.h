// Test helpers: real ClientHellos produced by OpenSSL in-process (memory BIOs, no sockets),
// and re-framing of a hello into several TLS records. Used by the unit tests and by the tool
// that writes the fuzzer's seed corpus. Not linked into the gateway.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cordon::gateway::testing {

struct HelloOptions {
  std::string sni;                // empty = no SNI extension
  std::vector<std::string> alpn;  // e.g. {"h2", "http/1.1"}
  int max_version = 0;            // 0 = library default (TLS 1.3); else e.g. TLS1_2_VERSION
};

// The bytes OpenSSL's client writes first (its ClientHello, in one or more records).
// Aborts the test process if OpenSSL fails (this is test-only code).
std::string make_client_hello(const HelloOptions& options);

// Takes the wire bytes of a hello in one record and re-frames its handshake message into
// records whose payload sizes are `sizes` (the last size repeats until the message is used up).
std::string split_into_records(std::string_view one_record_hello, std::vector<size_t> sizes);

}  // namespace cordon::gateway::testing
