#include "gateway/stages/request_checks.h"

#include <algorithm>

#include "common/host_name.h"
#include "common/http_grammar.h"

namespace cordon::gateway {
namespace {

// Field values: VCHAR, SP, HTAB and obs-text. Refuses NUL, CR, LF (so obs-fold and bare CR/LF
// that survived a lenient parser), every other control byte and DEL.
bool is_field_value(std::string_view s) {
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\t') continue;
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

RequestVerdict reject(int status, std::string reason, std::string detail) {
  RequestVerdict v;
  v.rejection = Rejection{status, std::move(reason), std::move(detail)};
  return v;
}

std::optional<uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + unsigned(c - '0');
  }
  if (v == 0 || v > 65535) return std::nullopt;
  return uint16_t(v);
}

bool same_host(const HostPort& a, std::string_view canonical_host) {
  return a.host == canonical_host;
}

// Hop-by-hop headers never forwarded as sent (RFC 9110 §7.6.1, plus the proxy ones).
constexpr std::string_view kHopByHop[] = {
    "connection",         "keep-alive", "proxy-connection", "proxy-authorization",
    "proxy-authenticate", "te",         "http2-settings"};

// Names that must never be listed in Connection: dropping them would change the framing or the
// destination of the request between us and the upstream.
constexpr std::string_view kNotHopByHop[] = {"host", "content-length", "transfer-encoding"};

struct Target {
  TargetForm form = TargetForm::kOrigin;
  std::string scheme;  // lower-case, absolute-form only
  std::optional<HostPort> authority;
  std::string path;
  std::optional<std::string> query;
};

void split_path_query(std::string_view rest, Target& t) {
  size_t q = rest.find('?');
  if (q == std::string_view::npos) {
    t.path = std::string(rest);
  } else {
    t.path = std::string(rest.substr(0, q));
    t.query = std::string(rest.substr(q + 1));
  }
}

// Parses the request-target into one of the four forms (RFC 9112 §3.2). Returns a reason
// code on refusal.
std::optional<std::string> parse_target(std::string_view target, bool is_connect, Target& t) {
  if (target.empty()) return "target_empty";
  for (char ch : target) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || c == '#') return "target_invalid_bytes";
  }
  if (is_connect) {
    t.form = TargetForm::kAuthority;
    t.authority = parse_host_port(target);
    if (!t.authority) return "target_invalid_authority";
    return std::nullopt;
  }
  if (target == "*") {
    t.form = TargetForm::kAsterisk;
    t.path = "*";
    return std::nullopt;
  }
  if (target.front() == '/') {
    t.form = TargetForm::kOrigin;
    split_path_query(target, t);
    return std::nullopt;
  }
  size_t colon = target.find("://");
  if (colon == std::string_view::npos || colon == 0) return "target_form_invalid";
  std::string_view scheme = target.substr(0, colon);
  bool scheme_ok = (scheme[0] >= 'a' && scheme[0] <= 'z') || (scheme[0] >= 'A' && scheme[0] <= 'Z');
  for (char c : scheme) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '-' || c == '.';
    scheme_ok = scheme_ok && ok;
  }
  if (!scheme_ok) return "target_form_invalid";
  t.form = TargetForm::kAbsolute;
  t.scheme = ascii_lower(scheme);
  std::string_view rest = target.substr(colon + 3);
  size_t end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, end);
  t.authority = parse_host_port(authority);
  if (!t.authority) return "target_invalid_authority";
  std::string_view after = end == std::string_view::npos ? std::string_view() : rest.substr(end);
  if (after.empty() || after.front() == '?') {
    t.path = "/";
    if (!after.empty()) t.query = std::string(after.substr(1));
  } else {
    split_path_query(after, t);
  }
  return std::nullopt;
}

}  // namespace

std::optional<HostPort> parse_host_port(std::string_view a) {
  if (a.empty() || a.size() > kMaxAuthorityBytes) return std::nullopt;
  if (a.find('@') != std::string_view::npos) return std::nullopt;  // userinfo: never
  HostPort hp;
  std::string_view host;
  std::string_view port;
  bool has_port = false;
  if (a.front() == '[') {
    size_t close = a.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    auto v6 = canonical_ipv6(a.substr(1, close - 1));
    if (!v6) return std::nullopt;
    hp.host = *v6;
    hp.is_ip = true;
    std::string_view rest = a.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
      has_port = true;
    }
  } else {
    size_t colon = a.find(':');
    host = a.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = a.substr(colon + 1);
      has_port = true;
    }
    if (is_ipv4_literal(host)) {
      hp.host = std::string(host);
      hp.is_ip = true;
    } else {
      // One trailing dot is dropped (the absolute form); a second one is refused.
      if (!host.empty() && host.back() == '.') host.remove_suffix(1);
      HostNameBuffer buf;
      const HostNameCheck name = canonicalize_host_name(host, buf, TrailingDot::kRefuse);
      if (!name) return std::nullopt;
      hp.host.assign(buf.data(), name.size);
    }
  }
  if (has_port) {
    hp.port = parse_port(port);
    if (!hp.port) return std::nullopt;
  }
  return hp;
}

RequestVerdict check_request(const RequestHead& head, const ChannelFacts& facts,
                             const StageLimits& limits_in) {
  // Configuration may lower the limits, never raise them above the hard ceilings.
  StageLimits limits = limits_in;
  limits.max_request_line_bytes = std::min(limits.max_request_line_bytes, kHardMaxRequestLineBytes);
  limits.max_header_bytes = std::min(limits.max_header_bytes, kHardMaxHeaderBytes);
  limits.max_header_count = std::min(limits.max_header_count, kHardMaxHeaderCount);

  // --- sizes (threat 31) ---
  size_t line = head.method.size() + 1 + head.target.size() + 1 + 8;
  if (line > limits.max_request_line_bytes) {
    return reject(414, "request_line_too_long",
                  "request line of " + std::to_string(line) + " bytes exceeds " +
                      std::to_string(limits.max_request_line_bytes));
  }
  if (head.headers.size() > limits.max_header_count) {
    return reject(431, "too_many_headers",
                  std::to_string(head.headers.size()) + " header fields exceed " +
                      std::to_string(limits.max_header_count));
  }
  size_t header_bytes = 0;
  for (const auto& h : head.headers) header_bytes += h.name.size() + h.value.size() + 4;
  if (header_bytes > limits.max_header_bytes) {
    return reject(431, "headers_too_large",
                  "header block of " + std::to_string(header_bytes) + " bytes exceeds " +
                      std::to_string(limits.max_header_bytes));
  }

  // --- request line ---
  if (!is_http_token(head.method)) return reject(400, "method_invalid", "method is not a token");
  if (head.version_major != 1 || (head.version_minor != 0 && head.version_minor != 1)) {
    return reject(505, "http_version",
                  "HTTP/" + std::to_string(head.version_major) + "." +
                      std::to_string(head.version_minor) + " is not served (HTTP/1.0, 1.1 only)");
  }
  // TRACE reflects the request, injected credentials included, back to the sandbox.
  if (head.method == "TRACE" || head.method == "TRACK") {
    return reject(403, "method_refused", head.method + " would reflect injected credentials");
  }
  bool is_connect = head.method == "CONNECT";
  if (is_connect && facts.channel != Channel::kProxy) {
    // Threat 8: a proxy hop nested in an allowed tunnel or through a plain connection.
    return reject(403, "nested_connect", "CONNECT is only served at the explicit-proxy listener");
  }

  // --- header syntax (threat 14: obs-fold, bare CR/LF, control bytes, bad names) ---
  std::vector<const Header*> host_h, cl_h, te_h, upgrade_h, expect_h, connection_h;
  bool has_http2_settings = false;
  for (size_t i = 0; i < head.headers.size(); ++i) {
    const Header& h = head.headers[i];
    if (!is_http_token(h.name)) {
      return reject(400, "invalid_header_name",
                    "header #" + std::to_string(i) + " has a name with bytes outside tchar");
    }
    if (!is_field_value(h.value)) {
      return reject(400, "invalid_header_value",
                    "header " + h.name + " has control bytes, CR or LF in its value (obs-fold?)");
    }
    const std::string& n = h.name;
    if (ascii_iequals(n, "host"))
      host_h.push_back(&h);
    else if (ascii_iequals(n, "content-length"))
      cl_h.push_back(&h);
    else if (ascii_iequals(n, "transfer-encoding"))
      te_h.push_back(&h);
    else if (ascii_iequals(n, "upgrade"))
      upgrade_h.push_back(&h);
    else if (ascii_iequals(n, "expect"))
      expect_h.push_back(&h);
    else if (ascii_iequals(n, "connection"))
      connection_h.push_back(&h);
    else if (ascii_iequals(n, "http2-settings"))
      has_http2_settings = true;
  }

  // --- Host ---
  if (host_h.empty()) return reject(400, "host_missing", "no Host header");
  if (host_h.size() > 1) return reject(400, "host_repeated", "more than one Host header");
  auto host = parse_host_port(trim_ows(host_h[0]->value));
  if (!host) return reject(400, "host_invalid", "Host is not a valid host[:port]");

  // --- target ---
  Target target;
  if (auto why = parse_target(head.target, is_connect, target)) {
    return reject(400, *why, "request target refused");
  }
  if (target.form == TargetForm::kAsterisk && head.method != "OPTIONS") {
    return reject(400, "asterisk_form_not_options", "'*' target is only valid for OPTIONS");
  }

  CheckedRequest out;
  out.method = head.method;
  out.form = target.form;
  out.path = target.path;
  out.query = target.query;

  // --- identity (threats 1, 5, 6, 7) ---
  switch (facts.channel) {
    case Channel::kInterceptedTls: {
      if (facts.sni.empty()) return reject(403, "no_sni", "TLS connection without SNI");
      if (facts.connect_host && *facts.connect_host != facts.sni) {
        return reject(403, "connect_sni_mismatch", "SNI differs from the CONNECT host");
      }
      if (!same_host(*host, facts.sni)) {
        // 421 (RFC 9110 §15.5.20): this connection cannot serve that host; a well-behaved client
        // retries on a connection of its own, and a fronting attempt is refused all the same.
        return reject(421, "host_sni_mismatch",
                      "Host " + host->host + " differs from the SNI " + facts.sni);
      }
      if (host->port && *host->port != facts.port) {
        return reject(400, "host_port_mismatch", "Host port differs from the connection port");
      }
      if (target.form == TargetForm::kAbsolute) {
        if (target.scheme != "https") {
          return reject(400, "scheme_mismatch", "absolute-form scheme is not https inside TLS");
        }
        if (!same_host(*target.authority, facts.sni)) {
          return reject(421, "absolute_form_host_mismatch",
                        "absolute-form host " + target.authority->host + " differs from the SNI");
        }
        if (target.authority->port && *target.authority->port != facts.port) {
          return reject(400, "host_port_mismatch",
                        "absolute-form port differs from the connection");
        }
      }
      out.host = facts.sni;
      out.port = facts.port;
      break;
    }
    case Channel::kPlainTransparent: {
      if (facts.original_destination.empty()) {
        return reject(403, "no_original_destination", "plain connection without a destination");
      }
      if (host->is_ip) {
        std::string dst = facts.original_destination;
        if (auto v6 = canonical_ipv6(dst)) dst = *v6;
        if (host->host != dst) {
          return reject(403, "host_ip_mismatch",
                        "IP-literal Host differs from the dialled address");
        }
      }
      if (host->port && *host->port != facts.port) {
        return reject(400, "host_port_mismatch", "Host port differs from the connection port");
      }
      if (target.form == TargetForm::kAbsolute) {
        if (target.scheme != "http") {
          return reject(400, "scheme_mismatch", "absolute-form scheme is not http on plain HTTP");
        }
        if (!same_host(*target.authority, host->host) ||
            (target.authority->port && *target.authority->port != facts.port)) {
          return reject(403, "absolute_form_host_mismatch",
                        "absolute-form authority differs from Host");
        }
      }
      out.host = host->host;
      out.port = facts.port;
      break;
    }
    case Channel::kProxy: {
      if (target.form == TargetForm::kOrigin || target.form == TargetForm::kAsterisk) {
        return reject(400, "proxy_requires_absolute_form",
                      "the explicit proxy serves CONNECT and absolute-form http:// requests");
      }
      if (target.form == TargetForm::kAuthority) {
        if (!target.authority->port) {
          return reject(400, "connect_port_missing", "CONNECT target lacks a port");
        }
        out.port = *target.authority->port;
      } else {
        if (target.scheme != "http") {
          return reject(400, "scheme_mismatch",
                        "absolute-form " + target.scheme + ":// at the proxy (use CONNECT)");
        }
        out.port = target.authority->port.value_or(80);
      }
      if (!same_host(*host, target.authority->host) || (host->port && *host->port != out.port)) {
        return reject(403, "host_authority_mismatch", "Host differs from the target authority");
      }
      out.host = target.authority->host;
      break;
    }
  }

  // --- framing (threat 14: CL.TE, TE.CL, obfuscated TE, duplicate CL) ---
  if (te_h.size() > 1) {
    return reject(400, "te_repeated", "more than one Transfer-Encoding header");
  }
  if (cl_h.size() > 1) return reject(400, "cl_repeated", "more than one Content-Length header");
  if (!te_h.empty() && !cl_h.empty()) {
    return reject(400, "cl_and_te", "both Content-Length and Transfer-Encoding");
  }
  if (!te_h.empty()) {
    // Exactly "chunked": no lists, no whitespace, no look-alikes.
    if (!ascii_iequals(te_h[0]->value, "chunked")) {
      return reject(400, "te_not_chunked", "Transfer-Encoding other than exactly 'chunked'");
    }
    if (head.version_minor == 0) {
      return reject(400, "te_http10", "Transfer-Encoding on an HTTP/1.0 request");
    }
    out.framing = BodyFraming::kChunked;
  }
  if (!cl_h.empty()) {
    std::string_view v = cl_h[0]->value;
    if (v.empty() ||
        !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return reject(400, "cl_invalid", "Content-Length is not a plain decimal number");
    }
    if (v.size() > kMaxContentLengthDigits) {
      return reject(413, "cl_too_large", "Content-Length has too many digits");
    }
    uint64_t n = 0;
    for (char c : v) n = n * 10 + uint64_t(c - '0');  // at most 19 digits: no overflow
    if (n > limits.max_content_length_bytes) {
      return reject(413, "cl_too_large", "Content-Length exceeds the configured maximum");
    }
    out.framing = BodyFraming::kContentLength;
    out.content_length = n;
  }
  if (is_connect && (out.framing == BodyFraming::kChunked || out.content_length > 0)) {
    return reject(400, "connect_with_body", "CONNECT request with a body");
  }

  // --- Connection and hop-by-hop ---
  out.keep_alive = head.version_minor == 1;
  bool connection_upgrade = false;
  out.strip_headers.reserve(std::size(kHopByHop) + 4);  // + "upgrade" and a few listed names
  for (std::string_view s : kHopByHop) out.strip_headers.emplace_back(s);
  for (const Header* h : connection_h) {
    std::string_view rest = h->value;
    while (true) {
      size_t comma = rest.find(',');
      std::string_view item = trim_ows(rest.substr(0, comma));
      if (!item.empty()) {
        if (!is_http_token(item)) {
          return reject(400, "connection_invalid", "Connection lists a non-token");
        }
        std::string name = ascii_lower(item);
        if (std::find(std::begin(kNotHopByHop), std::end(kNotHopByHop), name) !=
            std::end(kNotHopByHop)) {
          return reject(400, "connection_lists_protected",
                        "Connection lists " + name + " (would change framing or destination)");
        }
        if (name == "close") {
          out.keep_alive = false;
        } else if (name == "keep-alive") {
          if (head.version_minor == 0) out.keep_alive = true;
        } else if (name == "upgrade") {
          connection_upgrade = true;
        } else if (std::find(out.strip_headers.begin(), out.strip_headers.end(), name) ==
                   out.strip_headers.end()) {
          out.strip_headers.push_back(std::move(name));
        }
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }

  // --- Upgrade (threat 16): websocket only ---
  if (has_http2_settings) return reject(403, "upgrade_refused", "HTTP2-Settings (h2c upgrade)");
  if (!upgrade_h.empty()) {
    if (upgrade_h.size() > 1 || !ascii_iequals(trim_ows(upgrade_h[0]->value), "websocket")) {
      return reject(403, "upgrade_refused", "Upgrade other than a single 'websocket'");
    }
    if (!connection_upgrade || head.method != "GET" || head.version_minor != 1 ||
        out.framing != BodyFraming::kNone || target.form == TargetForm::kAsterisk) {
      return reject(400, "upgrade_malformed",
                    "websocket upgrade needs GET, HTTP/1.1, Connection: upgrade and no body");
    }
    out.websocket_upgrade = true;
  } else {
    out.strip_headers.emplace_back("upgrade");
  }

  // --- Expect ---
  if (expect_h.size() > 1 ||
      (expect_h.size() == 1 && !ascii_iequals(trim_ows(expect_h[0]->value), "100-continue"))) {
    return reject(417, "expect_unsupported", "Expect other than a single 100-continue");
  }
  out.expect_continue = !expect_h.empty();

  RequestVerdict v;
  v.accepted = std::move(out);
  return v;
}

}  // namespace cordon::gateway
