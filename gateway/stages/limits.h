// Limits of the socket-free request stages (ClientHello, request head checks, credential
// injection). Everything here bounds what an untrusted sandbox controls. "Hard" limits are
// enforced by the stage itself whatever the caller asks; "soft" limits are defaults that the
// gateway may override from configuration (StageLimits), never above the hard ceiling.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cordon::gateway {

// --- TLS ClientHello (client_hello.h) ---

// Hard. Bytes of the whole ClientHello as seen on the wire: every TLS record that carries it,
// record headers included. Real hellos are 0.2-2 KiB (post-quantum key shares ~1.8 KiB); 16 KiB
// leaves room for large session tickets and is also the size of the peek buffer the gateway
// needs. A hello that has not completed within this many bytes is refused.
inline constexpr size_t kMaxClientHelloBytes = 16 * 1024;
// Hard. TLS plaintext record payload ceiling (RFC 8446 §5.1: 2^14 bytes).
inline constexpr size_t kMaxTlsRecordPayloadBytes = 16 * 1024;

// --- HTTP/1.1 request head (request_checks.h) ---

// Soft default (configurable): bytes of the request line ("GET /x HTTP/1.1", CRLF excluded).
inline constexpr size_t kDefaultMaxRequestLineBytes = 8 * 1024;
// Soft default (configurable): bytes of all header names and values together, plus 4 per
// header for ": " and CRLF (the wire size of the header block, request line excluded).
inline constexpr size_t kDefaultMaxHeaderBytes = 32 * 1024;
// Soft default (configurable): number of header fields.
inline constexpr size_t kDefaultMaxHeaderCount = 100;
// Hard ceilings for the three above: configuration cannot raise them further.
inline constexpr size_t kHardMaxRequestLineBytes = 64 * 1024;
inline constexpr size_t kHardMaxHeaderBytes = 256 * 1024;
inline constexpr size_t kHardMaxHeaderCount = 1000;
// Hard. Content-Length digits accepted (19 digits fit a uint64 below 10^19); a longer value is
// refused as "huge" before conversion, so no overflow is possible.
inline constexpr size_t kMaxContentLengthDigits = 19;
// Soft default (configurable): largest declared request body, in bytes (the body itself is
// streamed with bounded buffers; this only refuses absurd declarations). 64 GiB.
inline constexpr uint64_t kDefaultMaxContentLengthBytes = 64ull * 1024 * 1024 * 1024;
// Hard. Host header / authority length in bytes (253 for the name, 1 + 5 for ":65535", and
// brackets of an IPv6 literal).
inline constexpr size_t kMaxAuthorityBytes = 300;

// --- Credential injection (credential_injector.h) ---

// Hard. Bytes of one rendered credential header value; a bigger rendering is refused.
inline constexpr size_t kMaxRenderedCredentialBytes = 8 * 1024;
// Hard. Proxy tokens found in one request before the scan stops and denies (a request with
// more than this is refused as token_misuse anyway).
inline constexpr size_t kMaxTokensPerRequest = 16;

// --- DNS (dns_message.h) ---

// Hard. Largest DNS query accepted (UDP with EDNS, or one TCP message); bigger is refused.
inline constexpr size_t kMaxDnsQueryBytes = 4096;
// Hard. RFC 1035 §2.3.4: 63 bytes per label, 255 bytes per name in wire form.
inline constexpr size_t kMaxDnsLabelBytes = 63;
inline constexpr size_t kMaxDnsNameWireBytes = 255;
// Hard. Compression pointers followed while reading one name (each must point backwards, so
// loops are impossible anyway; this bounds the work).
inline constexpr size_t kMaxDnsPointerHops = 16;
// Hard. Addresses put in one answer; the rest are dropped so that a response stays small.
inline constexpr size_t kMaxDnsAnswers = 16;
// Hard. Largest DNS response the gateway's resolver reads (a TCP message's length prefix is
// 16 bits, so this is the protocol's own ceiling).
inline constexpr size_t kMaxDnsResponseBytes = 65535;
// Hard. Resource records read from one response, and CNAME hops followed from the question.
inline constexpr size_t kMaxDnsResponseRecords = 64;
inline constexpr size_t kMaxDnsCnameHops = 8;
// UDP payload size we advertise in EDNS responses (the DNS flag day 2020 value), bytes.
inline constexpr uint16_t kDnsEdnsUdpSize = 1232;

// The configurable subset, passed to check_request(); defaults are the soft values above.
struct StageLimits {
  size_t max_request_line_bytes = kDefaultMaxRequestLineBytes;
  size_t max_header_bytes = kDefaultMaxHeaderBytes;
  size_t max_header_count = kDefaultMaxHeaderCount;
  uint64_t max_content_length_bytes = kDefaultMaxContentLengthBytes;
};

}  // namespace cordon::gateway
