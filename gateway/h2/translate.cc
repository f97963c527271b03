#include "gateway/h2/translate.h"

#include <algorithm>
#include <cstdio>

#include "gateway/stages/credential_injector.h"

namespace cordon::gateway::h2 {
namespace {

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::any_of(names.begin(), names.end(),
                     [&](std::string_view n) { return ascii_iequals(name, n); });
}

// Fields of an HTTP/1.1 response that do not exist in h2 (RFC 9113 §8.2.2) or that the
// gateway states itself.
bool response_dropped(std::string_view name) {
  return one_of(name, {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                       "transfer-encoding", "upgrade", "te", "trailer", "http2-settings"});
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string> connection_listed(const HeaderList& headers) {
  std::vector<std::string> out;
  for (const auto& h : headers) {
    if (!ascii_iequals(h.name, "connection")) continue;
    std::string_view rest = h.value;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view item = trim(rest.substr(0, comma));
      if (!item.empty()) out.push_back(ascii_lower(item));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return out;
}

// Shared by response headers and trailers: lower-case, trimmed, secrets removed.
void copy_filtered(const HeaderList& in, const std::vector<std::string>& scrub_values,
                   const std::vector<std::string>& also_drop, bool trailers, HeaderList& out,
                   std::vector<std::string>* scrubbed) {
  ResponseScrubber scrubber(scrub_values);
  for (const auto& h : in) {
    if (response_dropped(h.name)) continue;
    if (std::find(also_drop.begin(), also_drop.end(), ascii_lower(h.name)) != also_drop.end())
      continue;
    if (trailers && one_of(h.name, {"content-length", "host", "set-cookie", "authorization",
                                    "cookie", "proxy-authorization"}))
      continue;
    if (scrubber.active() && scrubber.leak_form(h)) {
      if (scrubbed) scrubbed->push_back(ascii_lower(h.name));
      continue;
    }
    out.push_back(Header{ascii_lower(h.name), std::string(trim(h.value))});
  }
}

}  // namespace

detail::MessageHead to_http1_request(const H2RequestHead& r) {
  detail::MessageHead m;
  m.method = r.method;
  m.target = r.path;
  m.http_major = 1;
  m.http_minor = 1;
  m.keep_alive = true;
  m.headers.reserve(r.headers.size() + 2);
  m.headers.push_back(Header{"host", r.authority});
  // RFC 9113 §8.2.3: cookie may be split into several fields in h2; HTTP/1.1 wants one.
  std::string cookie;
  bool cookie_placed = false;
  size_t cookie_at = 0;
  for (const auto& h : r.headers) {
    if (h.name == "cookie") {
      if (!cookie.empty()) cookie.append("; ");
      cookie.append(h.value);
      if (!cookie_placed) {
        cookie_placed = true;
        cookie_at = m.headers.size();
        m.headers.push_back(Header{"cookie", {}});
      }
      continue;
    }
    m.headers.push_back(h);
  }
  if (cookie_placed) m.headers[cookie_at].value = std::move(cookie);
  if (r.content_length) {
    m.content_length = r.content_length;
    m.headers.push_back(Header{"content-length", std::to_string(*r.content_length)});
  } else if (!r.end_stream) {
    // A body of unknown length follows (gRPC, streaming uploads): chunked upstream.
    m.chunked = true;
    m.headers.push_back(Header{"transfer-encoding", "chunked"});
  } else if (r.method != "GET" && r.method != "HEAD" && r.method != "OPTIONS" &&
             r.method != "DELETE" && r.method != "TRACE") {
    m.content_length = 0;
    m.headers.push_back(Header{"content-length", "0"});
  }
  return m;
}

H2ResponseHead to_h2_response(const detail::MessageHead& resp,
                              const std::vector<std::string>& scrub_values) {
  H2ResponseHead out;
  out.status = resp.status;
  out.headers.reserve(resp.headers.size());
  copy_filtered(resp.headers, scrub_values, connection_listed(resp.headers), false, out.headers,
                &out.scrubbed);
  return out;
}

HeaderList to_h2_trailers(const HeaderList& trailers, const std::vector<std::string>& scrub_values,
                          std::vector<std::string>* scrubbed) {
  HeaderList out;
  copy_filtered(trailers, scrub_values, {}, true, out, scrubbed);
  return out;
}

void append_chunk(std::string& out, std::string_view data) {
  if (data.empty()) return;
  char line[24];
  int n = std::snprintf(line, sizeof line, "%zx\r\n", data.size());
  out.append(line, static_cast<size_t>(n));
  out.append(data);
  out.append("\r\n");
}

void append_last_chunk(std::string& out, const HeaderList& trailers,
                       const std::vector<std::string>& dropped) {
  out.append("0\r\n");
  for (const auto& h : to_h2_request_trailers(trailers, dropped)) {
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  out.append("\r\n");
}

HeaderList to_h2_request_trailers(const HeaderList& trailers,
                                  const std::vector<std::string>& dropped) {
  HeaderList out;
  for (const auto& h : trailers) {
    if (one_of(h.name,
               {"content-length", "transfer-encoding", "host", "authorization", "cookie",
                "connection", "proxy-authorization", "te", "trailer", "upgrade", "set-cookie"}))
      continue;
    if (std::find(dropped.begin(), dropped.end(), ascii_lower(h.name)) != dropped.end()) continue;
    if (h.name.empty() || check_field(h) || h.name.front() == ':') continue;
    out.push_back(h);
  }
  return out;
}

H2UpstreamRequest to_h2_upstream_request(const HeaderList& upstream_headers,
                                         std::optional<uint64_t> content_length, bool te_trailers,
                                         const std::vector<std::string>& credential_names,
                                         const std::vector<std::string>& secrets,
                                         const std::vector<std::string>& client_never_indexed) {
  H2UpstreamRequest out;
  out.fields.reserve(upstream_headers.size() + 2);
  ResponseScrubber scrubber(secrets);
  auto listed = [](const std::vector<std::string>& names, const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  for (const auto& h : upstream_headers) {
    std::string name = ascii_lower(h.name);
    if (name == "host") {
      if (out.authority.empty()) out.authority = h.value;
      continue;
    }
    if (response_dropped(name) || name == "content-length" || name == "http2-settings") continue;
    bool secret = listed(credential_names, name) || listed(client_never_indexed, name) ||
                  one_of(name, {"authorization", "proxy-authorization", "cookie"}) ||
                  (scrubber.active() && scrubber.leak_form(h) != nullptr);
    out.fields.push_back(OutField{std::move(name), h.value, secret});
  }
  if (content_length) out.fields.push_back({"content-length", std::to_string(*content_length)});
  if (te_trailers) out.fields.push_back({"te", "trailers"});
  return out;
}

}  // namespace cordon::gateway::h2
