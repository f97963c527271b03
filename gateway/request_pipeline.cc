#include "gateway/request_pipeline.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

#include "gateway/stages/credential_injector.h"
#include "gateway/stages/request_checks.h"

namespace cordon::gateway {

using detail::MessageHead;

namespace {

Verdict refuse(Verdict v, int status, std::string error, std::string reason) {
  v.status = status;
  v.error = std::move(error);
  v.reason = std::move(reason);
  return v;
}

// The JSON error word of a refusal by the request checks.
std::string error_word(int status) {
  if (status == 403) return "egress_denied";
  if (status == 421) return "misdirected_request";
  return "bad_request";
}

Channel channel_of(const ConnectionFacts& conn) {
  if (conn.tls) return Channel::kInterceptedTls;
  return conn.absolute_form_required ? Channel::kProxy : Channel::kPlainTransparent;
}

// Vault answers for one token, in the injector's terms: the vault knows tokens, the injector
// knows which credential the request would get.
TokenVerdict verify_token(const CredentialSource& credentials, std::string_view sandbox_id,
                          const std::string& credential, std::string_view token) {
  TokenVerdict out;
  auto info = credentials.lookup_token(token, sandbox_id);
  if (!info) {
    out.reason = "unknown token";
    return out;
  }
  out.token_id = info->id;
  if (!info->sandbox_ok) {
    out.reason = "bound to another sandbox";
  } else if (!info->active) {
    out.kind = TokenVerdict::Kind::kInactive;
    out.reason = "revoked or expired";
  } else if (info->credential != credential) {
    out.kind = TokenVerdict::Kind::kOtherCredential;
  } else {
    out.kind = TokenVerdict::Kind::kValid;
  }
  return out;
}

// Refusals of the credential stage that are the operator's or the vault's fault, not the
// sandbox's: answered as errors, not as policy denials.
int credential_refusal_status(std::string_view reason) {
  if (reason == "secret_unavailable") return 502;
  if (reason == "forbidden_credential_header" || reason == "credential_spec_invalid" ||
      reason == "bad_rendered_value") {
    return 500;
  }
  return 403;
}

// Headers the gateway restates itself (framing, Host) or answers itself (Expect).
bool restated(std::string_view name) {
  return ascii_iequals(name, "host") || ascii_iequals(name, "content-length") ||
         ascii_iequals(name, "transfer-encoding") || ascii_iequals(name, "expect");
}

// Hop-by-hop headers of a response (RFC 9110 §7.6.1 and the proxy ones), plus the framing
// headers that the gateway restates.
bool response_hop_by_hop(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "connection", "keep-alive", "proxy-connection",  "proxy-authenticate", "te",
      "trailer",    "upgrade",    "transfer-encoding", "content-length"};
  for (auto n : kNames) {
    if (ascii_iequals(name, n)) return true;
  }
  return false;
}

bool contains_ci(const std::vector<std::string>& lower_names, std::string_view name) {
  return std::any_of(lower_names.begin(), lower_names.end(),
                     [&](const std::string& n) { return ascii_iequals(n, name); });
}

// The methods a request asks the server to run instead of its own (X-HTTP-Method-Override and
// its kin, the `_method` query parameter of web frameworks), upper-cased.
std::vector<std::string> override_methods(const HeaderList& headers, std::string_view path) {
  std::vector<std::string> out;
  for (const auto& h : headers) {
    if (ascii_iequals(h.name, "x-http-method-override") || ascii_iequals(h.name, "x-http-method") ||
        ascii_iequals(h.name, "x-method-override")) {
      out.push_back(h.value);
    }
  }
  size_t q = path.find('?');
  std::string_view query = q == std::string_view::npos ? std::string_view() : path.substr(q + 1);
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    size_t eq = pair.find('=');
    if (ascii_iequals(pair.substr(0, eq), "_method"))
      out.emplace_back(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  }
  for (auto& m : out) {
    while (!m.empty() && (m.back() == ' ' || m.back() == '\t')) m.pop_back();
    while (!m.empty() && (m.front() == ' ' || m.front() == '\t')) m.erase(0, 1);
    for (auto& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

std::optional<Authority> parse_authority(std::string_view text) {
  auto hp = parse_host_port(text);
  if (!hp) return std::nullopt;
  return Authority{std::move(hp->host), hp->port.value_or(0)};
}

Verdict evaluate_request(const PolicyView& policy, const CredentialSource& credentials,
                         const ConnectionFacts& conn, const MessageHead& req,
                         const Limits& limits) {
  Verdict v;
  v.port = conn.port;

  // ---- check ----------------------------------------------------------------------------
  RequestHead head{req.method, req.target, req.http_major, req.http_minor, req.headers};
  ChannelFacts facts;
  facts.channel = channel_of(conn);
  facts.sni = conn.host;
  facts.original_destination = conn.original_destination;
  facts.port = conn.port;
  facts.connect_host = conn.connect_host;
  StageLimits stage_limits;
  stage_limits.max_request_line_bytes = limits.max_request_line_bytes;
  stage_limits.max_header_bytes = limits.max_header_bytes;
  stage_limits.max_header_count = limits.max_header_count;
  RequestVerdict checked = check_request(head, facts, stage_limits);
  if (!checked.ok()) {
    if (conn.tls) v.host = conn.host;
    return refuse(v, checked.rejection.status, error_word(checked.rejection.status),
                  checked.rejection.reason);
  }
  CheckedRequest& cr = *checked.accepted;
  v.host = cr.host;
  v.port = cr.port;
  // A CONNECT is served only as the first request at the proxy listener (the session does it).
  if (cr.form == TargetForm::kAuthority) return refuse(v, 400, "bad_request", "nested_connect");

  // ---- canonicalize ---------------------------------------------------------------------
  std::string raw_target = cr.query ? cr.path + "?" + *cr.query : cr.path;
  auto canonical = policy.canonicalize_path(raw_target);
  if (!canonical) return refuse(v, 400, "bad_request", "ambiguous_path");
  v.canonical_path = *canonical;
  v.upstream_target = *canonical;

  // ---- decide ---------------------------------------------------------------------------
  RequestFacts rf;
  rf.profile = conn.sandbox.profile;
  rf.host = v.host;
  rf.port = v.port;
  rf.method = req.method;
  rf.path = v.canonical_path;
  rf.tls = conn.tls;
  v.decision = policy.decide(rf);
  // The sandbox's overlay narrows the profile, in report mode as well.
  if (conn.sandbox.overlay && !conn.sandbox.overlay->permits(v.host)) {
    v.decision.allow = false;
    v.decision.report_only = false;
    v.decision.credential.reset();
    v.decision.reason = "overlay_denied";
    v.decision.rule = "overlay";
  }
  if (!v.decision.allow && !v.decision.report_only) {
    return refuse(v, 403, "egress_denied",
                  v.decision.reason.empty() ? "policy" : v.decision.reason);
  }
  // ---- method overrides: the route must allow the overridden method as well (one route:
  // another route's credential or checks never apply), else the request is refused.
  if (v.decision.allow) {
    for (const std::string& m : override_methods(req.headers, v.canonical_path)) {
      if (m == req.method) continue;
      RequestFacts of = rf;
      of.method = m;
      Decision d = policy.decide(of);
      // (mode: report decides deny as allow + report_only: reported, not refused)
      if (d.report_only) continue;
      if (!d.allow || d.route != v.decision.route)
        return refuse(v, 403, "egress_denied", "method_override_denied");
    }
  }
  auto dest = policy.destination(conn.sandbox.profile, v.host, v.port);
  if (dest) v.scrub_response_body = dest->scrub_response_body;

  // ---- credentials: strip every credential header of the destination, then inject/swap --
  HeaderList& headers = head.headers;
  std::erase_if(headers, [&](const Header& h) {
    return restated(h.name) || contains_ci(cr.strip_headers, h.name);
  });
  const std::optional<CredentialSpec>& cred = v.decision.credential;
  std::optional<InjectionSpec> spec;
  std::vector<std::string> also_strip;
  if (cred) {
    spec = InjectionSpec{cred->name, cred->header, cred->format, TokenRequirement::kOff,
                         dest && dest->plaintext_credentials};
    if (cred->token == TokenMode::kOptional) spec->token_mode = TokenRequirement::kOptional;
    if (cred->token == TokenMode::kRequired) spec->token_mode = TokenRequirement::kRequired;
    v.dropped_trailers.push_back(ascii_lower(cred->header));
  }
  if (dest) {
    for (const auto& h : dest->credential_headers) {
      if (contains_ci(v.dropped_trailers, h)) continue;
      also_strip.push_back(h);
      v.dropped_trailers.push_back(ascii_lower(h));
    }
  }
  SecretSource secrets = [&](std::string_view) -> Result<std::string> {
    auto s = credentials.secret_value(cred->secret_name);
    if (s && !s->empty()) v.scrub_values.push_back(*s);
    return s;
  };
  TokenVerifier verify = [&](std::string_view token) {
    return verify_token(credentials, conn.sandbox.id, cred ? cred->name : std::string(), token);
  };
  InjectionReport report = inject_credentials(headers, req.target, spec ? &*spec : nullptr,
                                              conn.tls, secrets, verify, also_strip);
  v.token_id = report.token_id;
  if (!report.allowed) {
    v.credential_name = report.credential;
    int status = credential_refusal_status(report.reason);
    return refuse(v, status, status == 403 ? "egress_denied" : "credential_error", report.reason);
  }
  if (report.action != InjectionAction::kNone) {
    v.credential_name = report.credential;
    // The rendered value too (e.g. "Bearer <secret>"), should an upstream echo it whole.
    auto it = std::find_if(headers.rbegin(), headers.rend(),
                           [&](const Header& h) { return ascii_iequals(h.name, cred->header); });
    if (it != headers.rend() && !contains_ci(v.scrub_values, it->value)) {
      v.scrub_values.push_back(it->value);
    }
  }

  // ---- upstream head --------------------------------------------------------------------
  std::string host_value = v.host.find(':') != std::string::npos ? "[" + v.host + "]" : v.host;
  uint16_t default_port = conn.tls ? 443 : 80;
  if (v.port != default_port && v.port != 0) host_value += ":" + std::to_string(v.port);
  v.upstream_headers.reserve(headers.size() + 2);
  v.upstream_headers.push_back(Header{"Host", std::move(host_value)});
  for (auto& h : headers) v.upstream_headers.push_back(std::move(h));
  if (cr.websocket_upgrade) {
    v.websocket = true;
    v.upstream_headers.push_back(Header{"Connection", "Upgrade"});
  }
  v.expect_continue = cr.expect_continue;
  return v;
}

// ---- CredentialRound ------------------------------------------------------------------------

Result<std::string> CredentialRound::secret_value(std::string_view name) const {
  for (const auto& [n, answer] : secrets_) {
    if (n == name) return answer;
  }
  auto quick = source_.try_secret_value(name);
  if (quick.ready()) return std::move(*quick);
  if (std::find(missing_secrets_.begin(), missing_secrets_.end(), name) == missing_secrets_.end())
    missing_secrets_.emplace_back(name);
  // Fail closed should this answer ever be used (it is not: the verdict is discarded).
  return fail("secret '" + std::string(name) + "' not fetched yet");
}

std::optional<TokenInfo> CredentialRound::lookup_token(std::string_view token,
                                                       std::string_view sandbox_id) const {
  for (const auto& [key, answer] : tokens_) {
    if (key.token == token && key.sandbox == sandbox_id) return answer;
  }
  auto quick = source_.try_lookup_token(token, sandbox_id);
  if (quick.ready()) return std::move(*quick);
  TokenKey key{std::string(token), std::string(sandbox_id)};
  if (std::find(missing_tokens_.begin(), missing_tokens_.end(), key) == missing_tokens_.end())
    missing_tokens_.push_back(std::move(key));
  return std::nullopt;  // fail closed: an unknown token is refused
}

void CredentialRound::fetch_missing() {
  for (auto& name : missing_secrets_) {
    ++fetches_;
    Result<std::string> answer = source_.secret_value(name);
    secrets_.emplace_back(std::move(name), std::move(answer));
  }
  for (auto& key : missing_tokens_) {
    ++fetches_;
    std::optional<TokenInfo> answer = source_.lookup_token(key.token, key.sandbox);
    tokens_.emplace_back(std::move(key), std::move(answer));
  }
  missing_secrets_.clear();
  missing_tokens_.clear();
}

void CredentialRound::next_evaluation() {
  missing_secrets_.clear();
  missing_tokens_.clear();
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
  const bool switching = resp.status == 101;
  std::string out;
  out.reserve(512);
  out.append("HTTP/1.1 ").append(std::to_string(resp.status)).append(" ");
  // The reason phrase is informational; a fixed one avoids relaying arbitrary bytes.
  out.append(switching ? "Switching Protocols" : resp.status < 400 ? "OK" : "Error").append("\r\n");
  // Names listed in Connection are hop-by-hop too (RFC 9110 §7.6.1).
  std::vector<std::string> connection_listed;
  for (const auto& [k, val] : resp.headers) {
    if (!ascii_iequals(k, "connection")) continue;
    std::string_view rest = val;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
      while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
      if (!item.empty()) connection_listed.push_back(ascii_lower(item));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  ResponseScrubber scrubber(scrub);
  for (const auto& h : resp.headers) {
    bool keep_upgrade = switching && ascii_iequals(h.name, "upgrade");
    if (!keep_upgrade && (response_hop_by_hop(h.name) || contains_ci(connection_listed, h.name)))
      continue;
    if (scrubber.leak_form(h)) continue;
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  if (switching) {
    out.append("Connection: Upgrade\r\n");
  } else if (resp.chunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  } else if (resp.content_length) {
    out.append("Content-Length: ").append(std::to_string(*resp.content_length)).append("\r\n");
  }
  if (close && !switching) out.append("Connection: close\r\n");
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
    case 413:
      text = "Content Too Large";
      break;
    case 414:
      text = "URI Too Long";
      break;
    case 417:
      text = "Expectation Failed";
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
    case 505:
      text = "HTTP Version Not Supported";
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
