// ClientHello stage: read the SNI and ALPN from the first bytes of a connection to port 443,
// before any TLS is terminated, so that the gateway can refuse or choose a leaf certificate.
//
// Owns: TLS record framing and ClientHello syntax (RFC 8446 §4.1.2, RFC 6066 §3, RFC 7301).
// Trusts: nothing. The bytes come from an untrusted sandbox; every length is checked against
// the buffer and against kMaxClientHelloBytes, and nothing is read beyond the span given.
//
// Use: peek (MSG_PEEK) into a buffer of kMaxClientHelloBytes and call parse_client_hello() with
// all bytes seen so far, after each read. The function is stateless and re-parses from the
// start (at most 16 KiB, microseconds), so a hello split across TCP segments or across several
// TLS records (handshake reassembly) gives the same answer as one delivered whole.
//   kNeedMore -> read more (the buffer is below the cap); kDone -> use `hello`;
//   kNotTls   -> the first byte is not a TLS handshake (e.g. plain HTTP on 443): refuse;
//   kError    -> malformed or refused shape; `error` says why: refuse (alert/close) and audit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::gateway {

struct ClientHello {
  // server_name host_name, lower-cased and validated (LDH, no trailing dot, not an IP);
  // nullopt when the client sent no SNI extension (e.g. it dialled an IP literal).
  std::optional<std::string> sni;
  std::vector<std::string> alpn;             // in the client's order; empty when absent
  uint16_t record_version = 0;               // of the first record (0x0301..0x0303)
  uint16_t legacy_version = 0;               // ClientHello.legacy_version
  std::vector<uint16_t> supported_versions;  // extension 43; empty when absent
  size_t wire_bytes = 0;                     // bytes of the records that carried the hello
  size_t record_count = 0;                   // how many TLS records carried it
  // The client offered Encrypted Client Hello (0xfe0d): `sni` is then only the outer public
  // name; the gateway terminates with that name and the inner Host will not match it.
  bool ech_offered = false;
};

enum class HelloStatus { kNeedMore, kDone, kNotTls, kError };

struct HelloParse {
  HelloStatus status = HelloStatus::kNeedMore;
  ClientHello hello;  // meaningful when status == kDone
  std::string error;  // kError / kNotTls: a short reason naming the field and offset
  bool looks_like_tls() const { return status != HelloStatus::kNotTls; }
};

// Parses the bytes seen so far. Bytes after the records that carry the hello (e.g. early data)
// are ignored; bytes after the ClientHello inside its last record are an error.
HelloParse parse_client_hello(std::string_view bytes_seen);

std::string_view to_string(HelloStatus status);

}  // namespace cordon::gateway
