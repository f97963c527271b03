// Request-head stage: decides whether one parsed HTTP/1.1 request head may go on to policy, and
// what destination it names. Runs for every request of a connection (keep-alive, pipelining:
// threat 15), before policy and before credential injection.
//
// Owns: the identity checks between the TLS layer and HTTP (Host vs SNI, absolute-form and
// CONNECT authorities), request-target forms, request-smuggling shapes (CL/TE), header syntax,
// hop-by-hop headers, Upgrade. Trusts: nothing in the request (the sandbox is untrusted);
// trusts ChannelFacts, which the gateway fills from the socket and the verified ClientHello.
//
// Not here: path canonicalization. `CheckedRequest::path` and `query` are returned RAW (exactly
// as in the request target); the caller must pass them to the policy library's canonicalizer
// (which rejects ambiguous encodings) before deciding. This stage only refuses bytes that can
// never appear in a request target (controls, space, non-ASCII, '#').
//
// Expected input: what llhttp (strict mode) delivered: method, target, version and the header
// list in wire order, names and values raw. The checks do not rely on llhttp having refused
// anything; every shape below is refused here too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/stages/http_types.h"
#include "gateway/stages/limits.h"

namespace cordon::gateway {

struct RequestHead {
  std::string method;
  std::string target;  // request-target as sent
  int version_major = 1;
  int version_minor = 1;
  HeaderList headers;
};

// Where the request arrived; decides which identity the request must match.
enum class Channel {
  // Inside TLS that the gateway terminated: transparent port 443, or after an explicit-proxy
  // CONNECT. Identity = the verified SNI. CONNECT is refused here (threat 8).
  kInterceptedTls,
  // Plain HTTP steered transparently (port 80). No TLS identity: the Host names the
  // destination, the gateway resolves it itself (threat 2); an IP-literal Host must equal the
  // dialled address (threat 5). Credentials over this channel are the injector's decision.
  kPlainTransparent,
  // Plain bytes at the explicit-proxy listener: `CONNECT host:port` (authority-form) or an
  // absolute-form `http://` request. Origin-form is refused.
  kProxy,
};

struct ChannelFacts {
  Channel channel = Channel::kInterceptedTls;
  // kInterceptedTls: the SNI from parse_client_hello() (lower-case, validated). Required.
  std::string sni;
  // kPlainTransparent: the original destination address the sandbox dialled (IP literal,
  // IPv6 without brackets). Required there.
  std::string original_destination;
  // The port the sandbox connected to (original destination port, or the CONNECT port).
  uint16_t port = 443;
  // kInterceptedTls after an explicit-proxy CONNECT: the CONNECT authority host (canonical,
  // from a previous check_request on kProxy). The SNI must equal it (threat 6).
  std::optional<std::string> connect_host;
};

enum class TargetForm { kOrigin, kAbsolute, kAuthority, kAsterisk };
enum class BodyFraming { kNone, kContentLength, kChunked };

struct CheckedRequest {
  std::string method;  // as sent (methods are case-sensitive)
  std::string host;    // canonical: lower-case, no trailing dot, no port; IPv6 bare
  uint16_t port = 0;   // the port the upstream connection goes to
  TargetForm form = TargetForm::kOrigin;
  std::string path;                  // RAW path ("/a/b"; "*" for asterisk-form; "" for CONNECT)
  std::optional<std::string> query;  // RAW query without '?', if the target had one
  BodyFraming framing = BodyFraming::kNone;
  uint64_t content_length = 0;     // when framing == kContentLength
  bool websocket_upgrade = false;  // Upgrade: websocket accepted; forward Upgrade + Connection
  bool expect_continue = false;    // Expect: 100-continue
  bool keep_alive = true;          // false when the client asked to close (or HTTP/1.0)
  // Lower-case names of the headers to remove before forwarding: the hop-by-hop set
  // (Connection, Keep-Alive, Proxy-Connection, Proxy-Authorization, Proxy-Authenticate, TE,
  // Trailer, Upgrade unless websocket) and every name listed in Connection. When
  // websocket_upgrade is set the caller re-adds `Connection: Upgrade` itself.
  std::vector<std::string> strip_headers;
};

struct Rejection {
  int status = 400;    // 400, 403, 413, 414, 417, 421, 431, 505
  std::string reason;  // stable snake_case code for the audit line, e.g. "host_sni_mismatch"
  std::string detail;  // human readable; names the header or field (never a header value)
};

struct RequestVerdict {
  std::optional<CheckedRequest> accepted;  // set when the request may go on to policy
  Rejection rejection;                     // meaningful when !accepted
  bool ok() const { return accepted.has_value(); }
};

RequestVerdict check_request(const RequestHead& head, const ChannelFacts& facts,
                             const StageLimits& limits = {});

struct HostPort {
  std::string host;              // canonical
  std::optional<uint16_t> port;  // when the authority had one
  bool is_ip = false;
};

// Parses an authority / Host value: reg-name, IPv4 or [IPv6], optional :port. Refuses
// userinfo, empty host, bad ports, non-LDH names. One trailing dot on a name is dropped.
std::optional<HostPort> parse_host_port(std::string_view authority);

}  // namespace cordon::gateway
