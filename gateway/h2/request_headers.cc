#include "gateway/h2/request_headers.h"

#include <string_view>

#include "common/http_grammar.h"
#include "gateway/stages/limits.h"

namespace cordon::gateway::h2 {
namespace {

H2HeaderVerdict malformed(std::string reason, std::string detail) {
  H2HeaderVerdict v;
  v.refusal = HeaderRefusal::kMalformed;
  v.reason = std::move(reason);
  v.detail = std::move(detail);
  return v;
}

H2HeaderVerdict respond(int status, std::string reason, std::string detail) {
  H2HeaderVerdict v;
  v.refusal = HeaderRefusal::kRespond;
  v.status = status;
  v.reason = std::move(reason);
  v.detail = std::move(detail);
  return v;
}

// RFC 9113 §8.2.2: these make no sense in HTTP/2 and mark a request as malformed. h2c's
// HTTP2-Settings is refused alike: no upgrade happens inside h2.
bool connection_specific(std::string_view name) {
  static constexpr std::string_view kNames[] = {"connection", "proxy-connection",
                                                "keep-alive", "transfer-encoding",
                                                "upgrade",    "http2-settings"};
  for (auto n : kNames) {
    if (name == n) return true;
  }
  return false;
}

std::optional<uint64_t> parse_content_length(std::string_view s) {
  if (s.empty() || s.size() > kMaxContentLengthDigits) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

}  // namespace

std::optional<std::string> check_field(const Header& f) {
  std::string_view name = f.name;
  if (name.empty()) return "empty_header_name";
  std::string_view token = name.front() == ':' ? name.substr(1) : name;
  for (char c : token) {
    if (c >= 'A' && c <= 'Z') return "uppercase_header_name";
  }
  if (!is_http_token(token)) return "invalid_header_name";
  for (char ch : f.value) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '\t') continue;
    if (c < 0x20 || c == 0x7f) return "invalid_header_value";
  }
  if (!f.value.empty()) {
    char a = f.value.front(), b = f.value.back();
    if (a == ' ' || a == '\t' || b == ' ' || b == '\t') return "header_value_whitespace";
  }
  return std::nullopt;
}

H2HeaderVerdict validate_request_headers(const HeaderList& fields, bool end_stream) {
  H2RequestHead out;
  out.end_stream = end_stream;
  bool have_method = false, have_scheme = false, have_authority = false, have_path = false;
  bool regular_seen = false;
  const std::string* host = nullptr;
  size_t host_count = 0;
  out.headers.reserve(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) {
    const Header& f = fields[i];
    if (auto why = check_field(f)) {
      return malformed(*why, "field #" + std::to_string(i) + " is not a valid h2 field");
    }
    const std::string& n = f.name;
    if (n.front() == ':') {
      if (regular_seen) return malformed("pseudo_header_after_regular", n + " after a field");
      std::string* slot = nullptr;
      bool* seen = nullptr;
      if (n == ":method") {
        slot = &out.method, seen = &have_method;
      } else if (n == ":scheme") {
        slot = &out.scheme, seen = &have_scheme;
      } else if (n == ":authority") {
        slot = &out.authority, seen = &have_authority;
      } else if (n == ":path") {
        slot = &out.path, seen = &have_path;
      } else if (n == ":protocol") {
        // RFC 8441 extended CONNECT: the gateway does not send SETTINGS_ENABLE_CONNECT_PROTOCOL,
        // so a client must not use it (WebSocket over h2 is refused; HTTP/1.1 carries it).
        return malformed("extended_connect_not_enabled", ":protocol (RFC 8441) is not enabled");
      } else {
        return malformed("unknown_pseudo_header", n + " is not a request pseudo-header");
      }
      if (*seen) return malformed("pseudo_header_repeated", n + " appears twice");
      *seen = true;
      *slot = f.value;
      continue;
    }
    regular_seen = true;
    if (connection_specific(n)) {
      return malformed("connection_specific_header", n + " is not allowed in HTTP/2");
    }
    if (n == "te") {
      if (!ascii_iequals(f.value, "trailers")) {
        return malformed("te_not_trailers", "te may only say \"trailers\"");
      }
    } else if (n == "content-length") {
      auto cl = parse_content_length(f.value);
      if (!cl) return malformed("content_length_invalid", "content-length is not a number");
      if (out.content_length && *out.content_length != *cl) {
        return malformed("content_length_repeated", "two different content-length values");
      }
      out.content_length = cl;
      continue;  // restated by the translation
    } else if (n == "host") {
      host = &f.value;
      ++host_count;
      continue;  // restated from :authority
    }
    out.headers.push_back(f);
  }

  if (!have_method) return malformed("pseudo_header_missing", ":method is missing");
  if (!is_http_token(out.method)) return malformed("invalid_method", ":method is not a token");
  if (out.method == "CONNECT") {
    // A tunnel inside the intercepted connection (threat 8), whatever its shape.
    return respond(400, "nested_connect", "CONNECT inside an intercepted connection");
  }
  if (!have_scheme || !have_path) {
    return malformed("pseudo_header_missing",
                     !have_scheme ? ":scheme is missing" : ":path is missing");
  }
  if (out.path.empty()) return malformed("invalid_path", ":path is empty");
  for (char ch : out.path) {
    // The path becomes an HTTP/1.1 request line: a space would split it (h2→h1 smuggling);
    // controls, '#' and non-ASCII never belong in a request target.
    auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || c == '#') {
      return malformed("invalid_path", ":path has a byte outside visible ASCII");
    }
  }
  if (out.path == "*") {
    if (out.method != "OPTIONS") return malformed("invalid_path", "'*' is only for OPTIONS");
  } else if (out.path.front() != '/') {
    return malformed("invalid_path", ":path is not origin-form");
  }
  if (out.scheme != "https") {
    return respond(400, "scheme_mismatch", ":scheme is not https inside TLS");
  }
  if (host_count > 1) return respond(400, "host_repeated", "more than one host field");
  if (have_authority && out.authority.empty()) {
    return malformed("authority_empty", ":authority is empty");
  }
  if (out.authority.find('@') != std::string::npos) {
    return malformed("authority_userinfo", ":authority carries userinfo");
  }
  if (!have_authority) {
    if (!host) return respond(400, "authority_missing", "neither :authority nor host");
    out.authority = *host;
  } else if (host && !ascii_iequals(*host, out.authority)) {
    // RFC 9113 §8.3.1: a Host that names another entity than :authority (domain fronting
    // through whichever one an upstream would believe).
    return respond(400, "host_authority_mismatch", "host differs from :authority");
  }
  if (end_stream && out.content_length && *out.content_length != 0) {
    return malformed("content_length_mismatch", "content-length > 0 on a stream without DATA");
  }
  H2HeaderVerdict v;
  v.head = std::move(out);
  return v;
}

std::optional<std::string> validate_trailers(const HeaderList& fields) {
  for (const auto& f : fields) {
    if (auto why = check_field(f)) return why;
    if (f.name.front() == ':') return std::string("pseudo_header_in_trailers");
    if (connection_specific(f.name) || f.name == "te")
      return std::string("connection_specific_header");
  }
  return std::nullopt;
}

}  // namespace cordon::gateway::h2
