#include "gateway/request_pipeline.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

namespace cordon::gateway {

using detail::Header;
using detail::Headers;
using detail::iequals;
using detail::MessageHead;
using detail::to_lower;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool valid_host_name(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  for (char c : h) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
              c == ':' /* v6 literal */;
    if (!ok) return false;
  }
  return true;
}

// Headers that belong to one hop, or that the gateway restates itself (framing, Host).
bool hop_by_hop(std::string_view name) {
  static constexpr std::string_view kNames[] = {"connection",
                                                "keep-alive",
                                                "proxy-connection",
                                                "proxy-authorization",
                                                "proxy-authenticate",
                                                "te",
                                                "trailer",
                                                "transfer-encoding",
                                                "upgrade",
                                                "content-length",
                                                "expect",
                                                "host",
                                                "http2-settings"};
  for (auto n : kNames) {
    if (iequals(name, n)) return true;
  }
  return false;
}

// Names a credential may never set: framing, routing, connection management.
bool forbidden_injection(std::string_view name) {
  if (name.size() >= 6 && iequals(name.substr(0, 6), "proxy-")) return true;
  static constexpr std::string_view kNames[] = {
      "host",    "content-length", "transfer-encoding", "connection", "te",
      "upgrade", "keep-alive",     "trailer",           "expect"};
  for (auto n : kNames) {
    if (iequals(name, n)) return true;
  }
  return name.empty();
}

bool has_ctl(std::string_view v) {
  for (unsigned char c : v) {
    if ((c < 0x20 && c != '\t') || c == 0x7f) return true;
  }
  return false;
}

Verdict refuse(Verdict v, int status, std::string error, std::string reason) {
  v.status = status;
  v.error = std::move(error);
  v.reason = std::move(reason);
  return v;
}

// Words of a header value that could carry a token: split on separators used by auth schemes.
std::vector<std::string_view> words(std::string_view v) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < v.size()) {
    while (i < v.size() && std::string_view(" \t,;=:\"").find(v[i]) != std::string_view::npos) ++i;
    size_t j = i;
    while (j < v.size() && std::string_view(" \t,;=:\"").find(v[j]) == std::string_view::npos) ++j;
    if (j > i) out.push_back(v.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

std::optional<Authority> parse_authority(std::string_view text) {
  Authority a;
  std::string_view host = text, port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon != std::string_view::npos) {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
      if (host.find(':') != std::string_view::npos) return std::nullopt;
    }
  }
  if (!port.empty()) {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (ec != std::errc() || p != port.data() + port.size() || v == 0 || v > 65535) {
      return std::nullopt;
    }
    a.port = static_cast<uint16_t>(v);
  }
  a.host = to_lower(host);
  // A trailing dot names the same host: refuse rather than compare two spellings.
  if (!valid_host_name(a.host) || a.host.back() == '.') return std::nullopt;
  return a;
}

Verdict evaluate_request(const PolicyView& policy, const CredentialSource& credentials,
                         const ConnectionFacts& conn, const MessageHead& req) {
  Verdict v;
  v.port = conn.port;

  // ---- check: framing and smuggling shapes (llhttp already refused most of them) ----------
  if (req.count("content-length") > 1)
    return refuse(v, 400, "bad_request", "duplicate_content_length");
  if (req.count("transfer-encoding") > 1)
    return refuse(v, 400, "bad_request", "duplicate_transfer_encoding");
  if (const auto* te = req.find("transfer-encoding")) {
    if (req.find("content-length"))
      return refuse(v, 400, "bad_request", "content_length_and_transfer_encoding");
    if (!iequals(trim(*te), "chunked"))
      return refuse(v, 400, "bad_request", "obfuscated_transfer_encoding");
  }
  for (const auto& [k, val] : req.headers) {
    if (has_ctl(val) || k.empty()) return refuse(v, 400, "bad_request", "control_bytes_in_header");
  }
  if (req.http_major != 1) return refuse(v, 400, "bad_request", "http_version");
  if (req.method == "CONNECT") return refuse(v, 400, "bad_request", "nested_connect");
  if (req.count("host") != 1) return refuse(v, 400, "bad_request", "host_header_count");

  // ---- check: the host this request is for ------------------------------------------------
  auto host_hdr = parse_authority(trim(*req.find("host")));
  if (!host_hdr) return refuse(v, 400, "bad_request", "malformed_host");

  std::string_view target = req.target;
  std::string origin_target;
  std::optional<Authority> target_auth;
  auto starts_with_ci = [&](std::string_view s, std::string_view p) {
    return s.size() >= p.size() && iequals(s.substr(0, p.size()), p);
  };
  if (starts_with_ci(target, "http://") || starts_with_ci(target, "https://")) {
    bool https = starts_with_ci(target, "https://");
    if (https != conn.tls) return refuse(v, 400, "bad_request", "absolute_form_scheme");
    std::string_view rest = target.substr(https ? 8 : 7);
    size_t slash = rest.find_first_of("/?#");
    target_auth = parse_authority(rest.substr(0, slash));
    if (!target_auth) return refuse(v, 400, "bad_request", "malformed_absolute_form");
    if (rest.find('@') < slash) return refuse(v, 400, "bad_request", "userinfo_in_target");
    origin_target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
    if (origin_target.front() != '/')
      return refuse(v, 400, "bad_request", "malformed_absolute_form");
  } else if (!target.empty() && target.front() == '/') {
    if (conn.absolute_form_required) return refuse(v, 400, "bad_request", "origin_form_to_proxy");
    origin_target = std::string(target);
  } else {
    return refuse(v, 400, "bad_request", "request_target_form");
  }

  if (conn.tls) {
    // Host (and an absolute-form authority) must name the verified SNI, port aside.
    v.host = conn.host;
    if (host_hdr->host != conn.host)
      return refuse(v, 421, "misdirected_request", "host_sni_mismatch");
    if (target_auth && target_auth->host != conn.host) {
      return refuse(v, 421, "misdirected_request", "absolute_form_host_mismatch");
    }
  } else {
    if (target_auth) {
      if (host_hdr->host != target_auth->host)
        return refuse(v, 400, "bad_request", "host_target_mismatch");
      v.host = target_auth->host;
      if (conn.absolute_form_required) v.port = target_auth->port ? target_auth->port : 80;
    } else {
      v.host = host_hdr->host;
    }
  }

  // ---- canonicalize -----------------------------------------------------------------------
  auto canonical = policy.canonicalize_path(origin_target);
  if (!canonical) return refuse(v, 400, "bad_request", "ambiguous_path");
  v.canonical_path = *canonical;
  v.upstream_target = *canonical;

  // ---- decide ------------------------------------------------------------------------------
  RequestFacts facts;
  facts.profile = conn.sandbox.profile;
  facts.host = v.host;
  facts.port = v.port;
  facts.method = req.method;
  facts.path = v.canonical_path;
  facts.tls = conn.tls;
  v.decision = policy.decide(facts);
  if (!v.decision.allow && !v.decision.report_only) {
    return refuse(v, 403, "egress_denied",
                  v.decision.reason.empty() ? "policy" : v.decision.reason);
  }
  auto dest = policy.destination(conn.sandbox.profile, v.host, v.port);

  // ---- credentials: strip, then token swap or injection -----------------------------------
  std::vector<std::string> strip;
  if (dest) {
    for (const auto& h : dest->credential_headers) strip.push_back(to_lower(h));
  }
  const auto& cred = v.decision.credential;
  if (cred) strip.push_back(to_lower(cred->header));
  v.dropped_trailers = strip;

  std::optional<std::string> token;
  std::string token_header;
  for (const auto& [k, val] : req.headers) {
    if (iequals(k, "host")) continue;
    for (auto w : words(val)) {
      if (credentials.looks_like_token(w)) {
        if (token && *token != w) return refuse(v, 403, "egress_denied", "token_misuse");
        token = std::string(w);
        token_header = k;
      }
    }
  }
  // Tokens in the target (query strings) are never forwarded either.
  {
    std::string t = origin_target;
    for (auto& c : t) {
      if (c == '?' || c == '&' || c == '/') c = ' ';
    }
    for (auto w : words(t)) {
      if (credentials.looks_like_token(w)) return refuse(v, 403, "egress_denied", "token_misuse");
    }
  }

  std::string injected;
  if (token) {
    auto info = credentials.lookup_token(*token, conn.sandbox.id);
    if (info) v.token_id = info->id;
    // A revoked or expired token is refused as such wherever it is presented: the vault no
    // longer says which credential it was bound to, and "misuse" would mislead the operator.
    if (info && !info->active && info->sandbox_ok)
      return refuse(v, 403, "egress_denied", "token_inactive");
    bool bound_here = cred && cred->token != TokenMode::kOff &&
                      iequals(token_header, cred->header) && info &&
                      info->credential == cred->name && info->sandbox_ok;
    if (!bound_here) return refuse(v, 403, "egress_denied", "token_misuse");
    if (!info->active) return refuse(v, 403, "egress_denied", "token_inactive");
  } else if (cred && cred->token == TokenMode::kRequired) {
    return refuse(v, 403, "egress_denied", "token_required");
  }
  if (cred) {
    if (!conn.tls && !(dest && dest->plaintext_credentials)) {
      return refuse(v, 403, "egress_denied", "credential_over_plaintext");
    }
    if (forbidden_injection(cred->header)) {
      return refuse(v, 500, "credential_error", "credential_header_forbidden");
    }
    auto secret = credentials.secret_value(cred->secret_name);
    if (!secret) return refuse(v, 502, "credential_error", "credential_unavailable");
    std::string rendered = cred->format;
    size_t at = rendered.find("{secret}");
    if (at == std::string::npos) return refuse(v, 500, "credential_error", "credential_format");
    rendered.replace(at, 8, *secret);
    if (has_ctl(rendered) || secret->empty()) {
      return refuse(v, 500, "credential_error", "credential_value_invalid");
    }
    injected = rendered;
    v.scrub_values.push_back(*secret);
    if (rendered != *secret) v.scrub_values.push_back(rendered);
    v.credential_name = cred->name;
  }

  // ---- upstream head ------------------------------------------------------------------------
  std::vector<std::string> connection_listed;
  for (const auto& [k, val] : req.headers) {
    if (iequals(k, "connection")) {
      for (auto w : words(val)) connection_listed.push_back(to_lower(w));
    }
  }
  std::string host_value = v.host.find(':') != std::string::npos ? "[" + v.host + "]" : v.host;
  uint16_t default_port = conn.tls ? 443 : 80;
  if (v.port != default_port && v.port != 0) host_value += ":" + std::to_string(v.port);
  v.upstream_headers.emplace_back("Host", host_value);
  for (const auto& [k, val] : req.headers) {
    std::string lk = to_lower(k);
    if (hop_by_hop(lk)) continue;
    if (std::find(strip.begin(), strip.end(), lk) != strip.end()) continue;
    if (std::find(connection_listed.begin(), connection_listed.end(), lk) !=
        connection_listed.end()) {
      continue;
    }
    v.upstream_headers.emplace_back(k, val);
  }
  if (cred) v.upstream_headers.emplace_back(cred->header, injected);
  if (const auto* e = req.find("expect")) {
    if (!iequals(trim(*e), "100-continue")) return refuse(v, 417, "bad_request", "expectation");
    v.expect_continue = true;
  }
  return v;
}

std::string render_request_head(const MessageHead& req, const Verdict& v) {
  std::string out;
  out.reserve(512);
  out.append(req.method).append(" ").append(v.upstream_target).append(" HTTP/1.1\r\n");
  for (const auto& [k, val] : v.upstream_headers)
    out.append(k).append(": ").append(val).append("\r\n");
  if (req.chunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  } else if (req.content_length) {
    out.append("Content-Length: ").append(std::to_string(*req.content_length)).append("\r\n");
  }
  out.append("\r\n");
  return out;
}

std::string render_response_head(const MessageHead& resp, const std::vector<std::string>& scrub,
                                 bool close) {
  std::string out;
  out.reserve(512);
  out.append("HTTP/1.1 ").append(std::to_string(resp.status)).append(" ");
  // The reason phrase is informational; a fixed one avoids relaying arbitrary bytes.
  out.append(resp.status < 400 ? "OK" : "Error").append("\r\n");
  std::vector<std::string> connection_listed;
  for (const auto& [k, val] : resp.headers) {
    if (iequals(k, "connection")) {
      for (auto w : words(val)) connection_listed.push_back(to_lower(w));
    }
  }
  for (const auto& [k, val] : resp.headers) {
    std::string lk = to_lower(k);
    if (hop_by_hop(lk) && lk != "host") continue;
    if (std::find(connection_listed.begin(), connection_listed.end(), lk) !=
        connection_listed.end()) {
      continue;
    }
    bool secret = false;
    for (const auto& s : scrub) secret = secret || (!s.empty() && val.find(s) != std::string::npos);
    if (secret) continue;
    out.append(k).append(": ").append(val).append("\r\n");
  }
  if (resp.chunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  } else if (resp.content_length) {
    out.append("Content-Length: ").append(std::to_string(*resp.content_length)).append("\r\n");
  }
  if (close) out.append("Connection: close\r\n");
  out.append("\r\n");
  return out;
}

std::string render_error_response(int status, const std::string& error, const std::string& rule,
                                  const std::string& request_id, bool close,
                                  const std::string& extra_headers) {
  nlohmann::json j;
  j["error"] = error;
  if (!rule.empty()) j["rule"] = rule;
  j["request_id"] = request_id;
  std::string body = j.dump() + "\n";
  const char* text = "Error";
  switch (status) {
    case 400:
      text = "Bad Request";
      break;
    case 403:
      text = "Forbidden";
      break;
    case 407:
      text = "Proxy Authentication Required";
      break;
    case 408:
      text = "Request Timeout";
      break;
    case 414:
      text = "URI Too Long";
      break;
    case 421:
      text = "Misdirected Request";
      break;
    case 431:
      text = "Request Header Fields Too Large";
      break;
    case 502:
      text = "Bad Gateway";
      break;
    case 503:
      text = "Service Unavailable";
      break;
    default:
      break;
  }
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + text + "\r\n";
  out +=
      "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  out += extra_headers;
  if (close) out += "Connection: close\r\n";
  out += "\r\n" + body;
  return out;
}

}  // namespace cordon::gateway
