// libFuzzer driver for check_request(), inject_credentials(), strip_credentials() and
// scrub_response_headers(). Input: byte 0 picks the channel and TLS, byte 1 the token mode;
// then '\n'-separated lines: "METHOD TARGET", then "name:value" headers (values may hold any
// byte, CR included). Checks the stages' promises, not only the absence of crashes:
//  - an accepted request names a canonical host, and inside TLS exactly the SNI;
//  - after injection no client-sent credential header and no proxy token remain;
//  - after the response scrub no header holds the secret.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gateway/stages/credential_injector.h"
#include "gateway/stages/request_checks.h"

using namespace cordon::gateway;

namespace {
const std::string kSecret = "S3CRET-value-for-fuzzing";
const std::string kGoodToken = "cdn_ok_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > 64 * 1024) return 0;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  unsigned sel = uint8_t(in[0]);
  unsigned mode = uint8_t(in[1]) % 3;
  in.remove_prefix(2);

  RequestHead head;
  size_t nl = in.find('\n');
  std::string_view line = in.substr(0, nl);
  size_t sp = line.find(' ');
  head.method = std::string(line.substr(0, sp));
  if (sp != std::string_view::npos) head.target = std::string(line.substr(sp + 1));
  head.version_minor = (sel & 0x10) ? 0 : 1;
  while (nl != std::string_view::npos) {
    in.remove_prefix(nl + 1);
    nl = in.find('\n');
    std::string_view h = in.substr(0, nl);
    size_t colon = h.find(':');
    head.headers.push_back(
        Header{std::string(h.substr(0, colon)),
               colon == std::string_view::npos ? std::string() : std::string(h.substr(colon + 1))});
  }

  ChannelFacts facts;
  facts.channel = Channel(sel % 3);
  facts.sni = "api.example.com";
  facts.original_destination = "192.0.2.1";
  facts.port = facts.channel == Channel::kInterceptedTls ? 443 : 80;
  RequestVerdict v = check_request(head, facts);
  if (v.ok()) {
    const CheckedRequest& r = *v.accepted;
    if (r.port == 0) std::abort();
    if (facts.channel == Channel::kInterceptedTls && r.host != facts.sni) std::abort();
    for (char c : r.host) {
      if (c >= 'A' && c <= 'Z') std::abort();
    }
    if (!r.host.empty() && r.host.back() == '.') std::abort();
    if (r.framing == BodyFraming::kChunked && r.content_length != 0) std::abort();
  } else if (v.rejection.reason.empty() || v.rejection.status < 400) {
    std::abort();
  }

  InjectionSpec spec{"cred", "Authorization", "Bearer {secret}", TokenRequirement(mode),
                     (sel & 0x20) != 0};
  bool tls = (sel & 0x40) != 0;
  bool with_spec = (sel & 0x80) == 0;
  HeaderList headers = head.headers;
  InjectionReport rep = inject_credentials(
      headers, head.target, with_spec ? &spec : nullptr, tls,
      [](std::string_view) -> cordon::Result<std::string> { return kSecret; },
      [](std::string_view token) {
        TokenVerdict t;
        t.kind = token == kGoodToken ? TokenVerdict::Kind::kValid : TokenVerdict::Kind::kRefused;
        return t;
      });
  int cred_headers = 0;
  for (const auto& h : headers) {
    if (!find_proxy_tokens(h.name).empty() || !find_proxy_tokens(h.value).empty()) std::abort();
    if (with_spec && ascii_iequals(h.name, "Authorization")) {
      ++cred_headers;
      if (h.value != "Bearer " + kSecret) std::abort();  // only ours survives
    }
  }
  if (rep.allowed && with_spec && cred_headers != 1) std::abort();
  if (!rep.allowed && (rep.reason.empty() || cred_headers != 0)) std::abort();

  HeaderList stripped = head.headers;
  strip_credentials(stripped, head.target, &spec);
  for (const auto& h : stripped) {
    if (ascii_iequals(h.name, "Authorization")) std::abort();
  }

  HeaderList response = head.headers;
  scrub_response_headers(response, {kSecret});
  for (const auto& h : response) {
    if (h.value.find(kSecret) != std::string::npos || h.name.find(kSecret) != std::string::npos) {
      std::abort();
    }
  }
  return 0;
}
