// End-to-end: secrets echoed in response bodies (specs/egress-threats.md item 23) and the rules
// file's `gateway:` section reaching a running gateway (limits, the audit rule, reloads). The
// gateway in explicit-proxy mode on loopback, curl or a raw TLS client as the sandbox, the fake
// upstream's /reflect endpoints (the request head, values included, echoed in the body).
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

#include "common/encoding.h"
#include "gateway/adapters/adapters.h"
#include "gateway/adapters/settings_adapter.h"
#include "gateway/gateway.h"
#include "gateway/stages/http_types.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"
#include "policy/policy.h"
#include "tests/e2e/gateway/e2e_util.h"

namespace cordon::gateway {
namespace {

using e2e::RawClient;
using testing::FakeCredentials;
using testing::FakePolicy;
using testing::FakeSandboxes;

constexpr const char* kSecret = "ghp_REFLECTED_SECRET_0123456789";

class ScrubE2E : public e2e::GatewayFixture {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);
    if (std::system("curl --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "curl not installed";
    ASSERT_NO_FATAL_FAILURE(make_tmp("cordon-scrub-e2e"));
    start_upstream({"api.test", "raw.test"});
    make_certs();
    CredentialSpec gh{"github", "github-pat", "Authorization", "Bearer {secret}", TokenMode::kOff};
    policy = std::make_shared<FakePolicy>();
    policy->denied_prefixes = {"10.", "169.254."};  // the fake upstream is on loopback
    policy->destinations = {
        {"api",
         {"api.test"},
         {upstream->port()},
         TlsMode::kIntercept,
         false,
         {{"cred", true, {}, "/reflect", gh}, {"any", true, {}, "", std::nullopt}}},
        {"raw",
         {"raw.test"},
         {upstream->port()},
         TlsMode::kIntercept,
         false,
         {{"cred", true, {}, "", gh}},
         false},  // scrub_response_body: false
    };
    policy->profiles["default"] = {"api", "raw"};
    sandboxes = std::make_shared<FakeSandboxes>();
    sandboxes->add("sb1", "secret1", "default");
    creds = std::make_shared<FakeCredentials>();
    creds->put_secret("github-pat", kSecret);
    opts = loopback_options(1);
    opts.resolve = {{"api.test", "127.0.0.1"}, {"raw.test", "127.0.0.1"}};
    ASSERT_NO_FATAL_FAILURE(start_proxy_gateway(opts, {certs, sandboxes, creds, audit}, policy));
  }

  std::string url(const std::string& path, const std::string& host = "api.test") {
    return upstream_url(host, path);
  }
  e2e::CurlResult curl(std::vector<std::string> args, bool http11 = true) {
    // Else curl negotiates h2 (the HTTP/2 relay).
    if (http11) args.insert(args.begin(), "--http1.1");
    return proxy_curl(args);
  }
  std::unique_ptr<RawClient> tunnel() {
    auto c = open_tunnel("api.test", "sb1:secret1");
    EXPECT_TRUE(c->start_tls("api.test", gateway_ca));
    return c;
  }
  // The audit line of the last request with `reason` (waits briefly: it may follow the answer).
  std::optional<AuditRecord> record_with(const std::string& reason) {
    auto recs = e2e::wait_records(*audit, [&](const AuditRecord& r) {
      return r.kind == AuditKind::kRequest && r.reason == reason;
    });
    if (recs.empty()) return std::nullopt;
    return recs.back();
  }
  static uint64_t count_of(const AuditRecord& r, const std::string& name) {
    for (const auto& [k, v] : r.counts)
      if (k == name) return v;
    return 0;
  }
  // What the upstream saw (the injected secret is in it) and its base64, as /reflect sends it.
  std::string upstream_head() {
    auto heads = upstream->heads();
    EXPECT_FALSE(heads.empty());
    return heads.empty() ? std::string() : heads.back();
  }
  void expect_no_secret(const std::string& text) {
    EXPECT_EQ(text.find(kSecret), std::string::npos) << text;
    EXPECT_EQ(text.find(base64_encode(std::string("Bearer ") + kSecret)), std::string::npos);
    std::string head = upstream_head();
    EXPECT_NE(head.find(kSecret), std::string::npos) << "the upstream got the credential";
    EXPECT_EQ(text.find(base64_encode(head)), std::string::npos) << text;
    // The reflected base64 of the head decodes, around the blanked run, to no secret either.
    size_t b = text.find("\"b64\":\"");
    if (b != std::string::npos) {
      std::string b64 = text.substr(b + 7, text.find('"', b + 7) - b - 7);
      for (char& ch : b64)
        if (ch == '*') ch = 'A';
      auto decoded = base64_decode(b64);
      if (decoded) {
        EXPECT_EQ(decoded->find(kSecret), std::string::npos);
      }
    }
  }

  GatewayOptions opts;
  std::shared_ptr<FakePolicy> policy;
  std::shared_ptr<FakeSandboxes> sandboxes;
  std::shared_ptr<FakeCredentials> creds;
};

TEST_F(ScrubE2E, ReflectedSecretIsScrubbedRawJsonAndBase64ContentLengthKept) {
  auto r = curl({url("/reflect")});
  ASSERT_EQ(r.exit_code, 0) << r.body;
  EXPECT_EQ(r.http_code, 200);
  EXPECT_NE(r.body.find("\"head\":\"GET \\/reflect HTTP\\/1.1"), std::string::npos) << r.body;
  expect_no_secret(r.body);
  // Same-length replacement: the upstream's Content-Length still frames the body.
  EXPECT_NE(r.headers.find("Content-Length: " + std::to_string(r.body.size())), std::string::npos)
      << r.headers;
  EXPECT_NE(upstream_head().find("Accept-Encoding: identity"), std::string::npos)
      << upstream_head();
  auto rec = record_with("allowed");
  ASSERT_TRUE(rec);
  EXPECT_GE(count_of(*rec, "body_secrets_scrubbed"), 2u);  // raw (JSON) and base64
}

TEST_F(ScrubE2E, OverHttp2TheReflectedSecretIsScrubbedToo) {
  auto r = curl({url("/reflect"), "--http2"}, false);
  ASSERT_EQ(r.exit_code, 0) << r.body;
  EXPECT_EQ(r.http_code, 200);
  EXPECT_NE(r.body.find("\"head\":\"GET \\/reflect HTTP\\/1.1"), std::string::npos) << r.body;
  expect_no_secret(r.body);
  EXPECT_NE(upstream_head().find("Accept-Encoding: identity"), std::string::npos);
}

TEST_F(ScrubE2E, ChunkedReflectionSplitAcrossChunksIsScrubbedAndTrailerDropped) {
  auto r = curl({url("/reflect-chunked"), "--raw"});
  ASSERT_EQ(r.exit_code, 0) << r.body;
  EXPECT_EQ(r.http_code, 200);
  expect_no_secret(r.body);
  EXPECT_EQ(r.body.find("X-Reflect-Trailer"), std::string::npos) << r.body;
  auto plain = curl({url("/reflect-chunked")});
  EXPECT_NE(plain.body.find("\"head\":\"GET \\/reflect-chunked"), std::string::npos) << plain.body;
  expect_no_secret(plain.body);
}

// The sandbox over HTTP/1.1 (the HTTP/1.1 relay) and over h2 (the h2 relay to an HTTP/1.1
// upstream): both decode the body the same way.
TEST_F(ScrubE2E, GzipBodyIsDecodedScrubbedAndSentDecodedOverHttp1AndHttp2) {
  for (bool http11 : {true, false}) {
    for (bool compressed : {false, true}) {
      SCOPED_TRACE(std::string(http11 ? "http/1.1" : "h2") + (compressed ? " --compressed" : ""));
      audit->clear();
      std::vector<std::string> args = {url("/reflect-gzip")};
      if (!http11) args.push_back("--http2");
      if (compressed) args.push_back("--compressed");  // curl then offers gzip, deflate, br
      auto r = curl(args, http11);
      ASSERT_EQ(r.exit_code, 0) << r.body;
      EXPECT_EQ(r.http_code, 200);
      EXPECT_EQ(ascii_lower(r.headers).find("content-encoding"), std::string::npos) << r.headers;
      EXPECT_NE(r.body.find("\"head\":\"GET \\/reflect-gzip"), std::string::npos) << r.body;
      expect_no_secret(r.body);
      // The gateway asked for identity whatever curl offered.
      EXPECT_NE(upstream_head().find("Accept-Encoding: identity"), std::string::npos);
      EXPECT_EQ(upstream_head().find("br"), std::string::npos) << upstream_head();
      auto rec = record_with("allowed");
      ASSERT_TRUE(rec);
      EXPECT_GE(count_of(*rec, "body_secrets_scrubbed"), 2u);
      EXPECT_GT(count_of(*rec, "body_bytes_decoded"), 0u);
    }
  }
}

TEST_F(ScrubE2E, BodyInACodingTheGatewayCannotCheckIsRefusedOverHttp1AndHttp2) {
  for (bool http11 : {true, false}) {
    SCOPED_TRACE(http11 ? "http/1.1" : "h2");
    audit->clear();
    std::vector<std::string> args = {url("/reflect-br")};
    if (!http11) args.push_back("--http2");
    auto r = curl(args, http11);
    EXPECT_EQ(r.http_code, 502);
    EXPECT_EQ(r.body.find(kSecret), std::string::npos);
    EXPECT_NE(r.body.find("\"error\":\"upstream_failed\""), std::string::npos) << r.body;
    auto rec = record_with("unscannable_content_encoding");
    ASSERT_TRUE(rec);
    EXPECT_EQ(rec->decision, AuditDecision::kError);
    EXPECT_EQ(rec->status, 502);
  }
}

TEST_F(ScrubE2E, DestinationThatOptsOutIsNotScrubbed) {
  auto r = curl({url("/reflect", "raw.test")});
  ASSERT_EQ(r.exit_code, 0);
  // The documented opt-out: the operator said this upstream may echo (e.g. a token endpoint).
  EXPECT_NE(r.body.find(kSecret), std::string::npos) << r.body;
}

TEST_F(ScrubE2E, ResponsesWithoutCredentialPassUntouched) {
  auto r = curl({url("/other/reflect")});  // route "any": no credential on this connection
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.http_code, 200);
  EXPECT_NE(r.body.find("GET /other/reflect HTTP/1.1"), std::string::npos) << r.body;
  EXPECT_EQ(upstream_head().find("Accept-Encoding: identity"), std::string::npos);
  auto rec = record_with("allowed");
  ASSERT_TRUE(rec);
  EXPECT_EQ(count_of(*rec, "body_secrets_scrubbed"), 0u);
}

// ---- the gateway section of the rules file ---------------------------------------------------

std::string request_with_header(size_t header_bytes) {
  return "GET /other HTTP/1.1\r\nHost: api.test\r\nX-Pad: " + std::string(header_bytes, 'p') +
         "\r\n\r\n";
}

TEST_F(ScrubE2E, ConfiguredHeaderLimitTakesEffectForConnectionsOpenedAfterTheReload) {
  RuntimeOptions small{opts.limits, opts.h2, true};
  small.limits.max_header_bytes = 2048;
  gateway->set_config(policy, small);
  auto before = tunnel();  // opened under the small limit
  ASSERT_TRUE(before->send(request_with_header(4096)));
  EXPECT_NE(before->read_until("\r\n\r\n").find(" 431 "), std::string::npos);

  auto kept = tunnel();  // opened under the small limit, used after the reload below
  ASSERT_TRUE(kept->send(request_with_header(100)));
  EXPECT_NE(kept->read_until("\r\n\r\n").find(" 200 "), std::string::npos);

  gateway->set_config(policy, RuntimeOptions{opts.limits, opts.h2, true});  // back to 32 KiB
  auto after = tunnel();
  ASSERT_TRUE(after->send(request_with_header(4096)));
  EXPECT_NE(after->read_until("\r\n\r\n").find(" 200 "), std::string::npos);
  // The connection keeps the limits it opened with (its parser holds them).
  ASSERT_TRUE(kept->send(request_with_header(4096)));
  EXPECT_NE(kept->read_until(" 431 ").find(" 431 "), std::string::npos);
}

TEST_F(ScrubE2E, DenyOnAuditFailureIsReloadedPerRequest) {
  audit->set_failing(true);
  EXPECT_EQ(curl({url("/other")}).http_code, 503);
  RuntimeOptions lenient{opts.limits, opts.h2, false};
  gateway->set_config(policy, lenient);
  EXPECT_EQ(curl({url("/other")}).http_code, 200);
  gateway->set_config(policy, RuntimeOptions{opts.limits, opts.h2, true});
  EXPECT_EQ(curl({url("/other")}).http_code, 503);
  audit->set_failing(false);
}

TEST_F(ScrubE2E, RulesFileGatewaySectionReachesTheGateway) {
  std::string port = std::to_string(upstream->port());
  std::string yaml =
      "version: 1\n"
      "floors: {deny_cidrs: [10.0.0.0/8]}\n"  // the fake upstream is on loopback
      "destinations:\n"
      "  - id: api\n"
      "    hosts: [api.test]\n"
      "    ports: [" +
      port +
      "]\n"
      "    routes: [{id: all}]\n"
      "profiles:\n"
      "  default: {destinations: [api]}\n"
      "gateway:\n"
      "  limits: {max_header_bytes: 1024}\n";
  auto compiled = policy::compile_policy(yaml, "rules.yaml");
  ASSERT_TRUE(compiled.ok()) << compiled.errors_text();
  gateway->set_config(adapters::make_policy_view(compiled.policy),
                      adapters::runtime_options(compiled.policy->gateway_settings(), opts));
  auto big = curl({url("/other"), "-H", "X-Pad: " + std::string(2000, 'p')});
  EXPECT_EQ(big.http_code, 431) << big.body;
  auto ok = curl({url("/other")});
  EXPECT_EQ(ok.http_code, 200) << ok.body;
  // The same file with the line out of range is refused by lint with its place.
  yaml.replace(yaml.find("1024"), 4, "100");
  auto bad = policy::compile_policy(yaml, "rules.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.errors_text().find("rules.yaml:11:"), std::string::npos) << bad.errors_text();
  EXPECT_NE(bad.errors_text().find("(allowed 1024-262144)"), std::string::npos);
}

}  // namespace
}  // namespace cordon::gateway
