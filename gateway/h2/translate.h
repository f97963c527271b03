// Translations between an HTTP/2 stream and the HTTP/1.1 messages of the gateway's pipeline
// and upstream connections. Pure functions; no nghttp2 here.
//
//   request:  validated H2RequestHead → HTTP/1.1 head (Host from :authority, cookies joined,
//             framing stated by the gateway: Content-Length when the client gave one,
//             chunked when a body follows without one), then checked by evaluate_request like
//             any HTTP/1.1 request. Field values were refused with CR, LF or NUL by the header
//             stage, so nothing sent as one h2 field can become two HTTP/1.1 lines (h2→h1
//             smuggling); the head is rendered by the pipeline's render_request_head.
//   upstream h2: the pipeline's upstream head (Host, end-to-end fields, credential injected)
//             → h2 request fields; credential and secret-carrying fields never-indexed.
//   response: HTTP/1.1 response head → h2 fields: connection-specific and framing fields
//             dropped, names lower-cased, fields carrying a secret value removed (threat 23),
//             and the same for trailers.
//
// Trust: requests from an untrusted sandbox (already validated), responses from an untrusted
// upstream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gateway/detail/http_parser.h"
#include "gateway/h2/client_session.h"
#include "gateway/h2/request_headers.h"

namespace cordon::gateway::h2 {

detail::MessageHead to_http1_request(const H2RequestHead& request);

struct H2ResponseHead {
  int status = 0;
  HeaderList headers;                 // lower-case names, no pseudo-header
  std::vector<std::string> scrubbed;  // names removed because they carried a secret
};

// `status` must be a final status (200-599); the caller handles 1xx.
H2ResponseHead to_h2_response(const detail::MessageHead& response,
                              const std::vector<std::string>& scrub_values);

// Upstream (HTTP/1.1 chunked) trailers → h2 trailers: framing, routing, connection-specific
// and secret-carrying fields dropped, names lower-cased.
HeaderList to_h2_trailers(const HeaderList& trailers, const std::vector<std::string>& scrub_values,
                          std::vector<std::string>* scrubbed = nullptr);

// The fields of an allowed request for an h2 upstream, from the pipeline's upstream head
// (`upstream_headers`: Host first, end-to-end fields, the credential injected): Host becomes
// `authority`, names are lower-cased, connection-specific fields dropped, content-length and
// `te: trailers` restated. Never-indexed (HPACK): the credential's fields (`credential_names`,
// lower-case), fields whose value holds a secret (`secrets`), authorization, cookie, and what
// the sandbox itself sent never-indexed (`client_never_indexed`).
struct H2UpstreamRequest {
  std::string authority;
  std::vector<OutField> fields;
};
H2UpstreamRequest to_h2_upstream_request(const HeaderList& upstream_headers,
                                         std::optional<uint64_t> content_length, bool te_trailers,
                                         const std::vector<std::string>& credential_names,
                                         const std::vector<std::string>& secrets,
                                         const std::vector<std::string>& client_never_indexed);

// The sandbox's request trailers for an h2 upstream: the fields append_last_chunk would drop
// are dropped here too.
HeaderList to_h2_request_trailers(const HeaderList& trailers,
                                  const std::vector<std::string>& dropped);

// One HTTP/1.1 chunk of `data` appended to `out` (nothing for empty data).
void append_chunk(std::string& out, std::string_view data);
// The last chunk with the request's h2 trailers: framing/routing fields, credential headers
// (`dropped`, lower-case) and everything the header stage would refuse are not forwarded.
void append_last_chunk(std::string& out, const HeaderList& trailers,
                       const std::vector<std::string>& dropped);

}  // namespace cordon::gateway::h2
