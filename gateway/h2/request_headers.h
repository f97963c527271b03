// HTTP/2 request header stage: decides whether the decoded header list of one stream is a
// well-formed request (RFC 9113 §8.2, §8.3) before it is translated to the HTTP/1.1 head that
// the gateway's request pipeline checks (Host vs SNI, path, policy, credentials).
//
// Owns: pseudo-header rules (missing, repeated, after regular fields, unknown, :protocol),
// field name and value syntax, connection-specific fields, `te`, content-length syntax,
// `:authority` vs `Host`, CONNECT. Trusts nothing in the fields (the sandbox is untrusted).
// Not here: whether `:authority` names the SNI (request_checks.h does that on the translated
// head, answering 421 on a coalesced connection), the DATA length against content-length (the
// session counts it, h2/server_session.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gateway/stages/http_types.h"

namespace cordon::gateway::h2 {

struct H2RequestHead {
  std::string method;
  std::string scheme;
  std::string authority;  // :authority, or Host when :authority was absent
  std::string path;       // :path as sent (raw; canonicalized later by the pipeline)
  // Regular fields in wire order, names lower-case; Host removed (restated from authority).
  HeaderList headers;
  std::optional<uint64_t> content_length;
  bool end_stream = false;  // END_STREAM came with HEADERS: no body
};

enum class HeaderRefusal {
  kMalformed,  // RFC 9113 §8.1.1: a stream error PROTOCOL_ERROR (RST_STREAM)
  kRespond,    // well-formed h2 that the gateway refuses: answer with `status`
};

struct H2HeaderVerdict {
  std::optional<H2RequestHead> head;  // set when accepted
  HeaderRefusal refusal = HeaderRefusal::kMalformed;
  int status = 400;
  std::string reason;  // stable snake_case code for the audit line
  std::string detail;  // human readable; names the field, never its value
  bool ok() const { return head.has_value(); }
};

// `fields`: the decoded header block in wire order (names as sent, not lower-cased).
H2HeaderVerdict validate_request_headers(const HeaderList& fields, bool end_stream);

// Trailers (a second HEADERS with END_STREAM): no pseudo-header, same field syntax, no
// connection-specific fields. Returns the refusal reason, or nullopt when valid.
std::optional<std::string> validate_trailers(const HeaderList& fields);

// Field syntax shared by requests, trailers and the fuzzer: lower-case tchar name (or a pseudo
// name), value without NUL/CR/LF/other controls and without leading or trailing whitespace.
// Returns the refusal reason, or nullopt.
std::optional<std::string> check_field(const Header& field);

}  // namespace cordon::gateway::h2
