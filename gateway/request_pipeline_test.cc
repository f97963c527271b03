#include "gateway/request_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gateway/testing/fakes.h"

namespace cordon::gateway {
namespace {

using detail::HttpParser;
using detail::MessageHead;
using testing::FakeCredentials;
using testing::FakePolicy;

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CredentialSpec gh{"github", "github-pat", "Authorization", "Bearer {secret}",
                      TokenMode::kOptional};
    CredentialSpec strict{"strict", "strict-key", "X-Api-Key", "{secret}", TokenMode::kRequired};
    policy.destinations.push_back({"api",
                                   {"api.test"},
                                   {443},
                                   TlsMode::kIntercept,
                                   false,
                                   {{"no-delete", false, {"DELETE"}, "", std::nullopt},
                                    {"repos", true, {"GET", "POST"}, "/repos/", gh},
                                    {"open", true, {"GET"}, "/open/", std::nullopt}}});
    policy.destinations.push_back({"strict",
                                   {"strict.test"},
                                   {443},
                                   TlsMode::kIntercept,
                                   false,
                                   {{"all", true, {}, "", strict}}});
    policy.destinations.push_back({"paste",
                                   {"paste.test"},
                                   {443, 80},
                                   TlsMode::kIntercept,
                                   false,
                                   {{"any", true, {}, "", std::nullopt}}});
    policy.destinations.push_back(
        {"plain", {"plain.test"}, {80}, TlsMode::kIntercept, false, {{"p", true, {}, "", gh}}});
    policy.profiles["default"] = {"api", "strict", "paste", "plain"};
    creds.put_secret("github-pat", "ghp_REALSECRET");
    creds.put_secret("strict-key", "sk_STRICT");
    creds.put_token(good, "tok1", "sb1", "github");
    creds.put_token(other_sandbox, "tok2", "sb2", "github");
    creds.put_token(strict_token, "tok3", "sb1", "strict");
    conn.sandbox = {"sb1", "default"};
    conn.host = "api.test";
    conn.port = 443;
    conn.tls = true;
  }

  Verdict run(const std::string& raw) {
    HttpParser p(HttpParser::Kind::kRequest, limits);
    p.feed(raw.data(), raw.size());
    if (p.failed()) {  // refused by the parser stage: same outcome as a 400 here
      Verdict v;
      v.status = p.error_status();
      v.reason = "parse_error";
      return v;
    }
    EXPECT_TRUE(p.head_complete()) << raw << p.error();
    head = p.head();
    return evaluate_request(policy, creds, conn, head);
  }
  std::string header(const Verdict& v, const std::string& name) {
    for (const auto& [k, val] : v.upstream_headers) {
      if (detail::iequals(k, name)) return val;
    }
    return "<none>";
  }

  const std::string good = FakeCredentials::make_token("tok1");
  const std::string other_sandbox = FakeCredentials::make_token("tok2");
  const std::string strict_token = FakeCredentials::make_token("tok3");
  Limits limits;
  FakePolicy policy;
  FakeCredentials creds;
  ConnectionFacts conn;
  MessageHead head;
};

TEST_F(PipelineTest, AllowedRequestGetsCredentialInjectedAndClientCopyStripped) {
  auto v =
      run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer mine\r\n"
          "Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nProxy-Authorization: Basic eA==\r\n\r\n");
  ASSERT_EQ(v.status, 0) << v.reason;
  EXPECT_EQ(v.decision.route, "repos");
  EXPECT_EQ(header(v, "authorization"), "Bearer ghp_REALSECRET");
  EXPECT_EQ(header(v, "x-hop"), "<none>");
  EXPECT_EQ(header(v, "proxy-authorization"), "<none>");
  EXPECT_EQ(header(v, "host"), "api.test");
  EXPECT_EQ(v.credential_name, "github");
  int auth_count = 0;
  for (const auto& [k, val] : v.upstream_headers) auth_count += detail::iequals(k, "authorization");
  EXPECT_EQ(auth_count, 1);
  std::string up = render_request_head(head, v);
  EXPECT_EQ(up.find("Bearer mine"), std::string::npos);
}

TEST_F(PipelineTest, DeniedByRouteMethodPathAndHost) {
  EXPECT_EQ(run("DELETE /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n").status, 403);
  EXPECT_EQ(run("PUT /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n").status, 403);
  auto v = run("GET /admin HTTP/1.1\r\nHost: api.test\r\n\r\n");
  EXPECT_EQ(v.status, 403);
  EXPECT_EQ(v.error, "egress_denied");
  EXPECT_EQ(v.reason, "no_route");
}

// A server that honours a method override would run another method than the one decided on:
// the overridden method must be allowed by the same route, else the request is refused.
TEST_F(PipelineTest, MethodOverridesAreCheckedAgainstTheRouteToo) {
  for (const char* h :
       {"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "x-http-method-override"}) {
    auto v = run(std::string("POST /repos/x HTTP/1.1\r\nHost: api.test\r\n") + h +
                 ": DELETE\r\nContent-Length: 0\r\n\r\n");
    EXPECT_EQ(v.status, 403) << h;
    EXPECT_EQ(v.reason, "method_override_denied") << h;
  }
  auto q =
      run("POST /repos/x?_method=delete HTTP/1.1\r\nHost: api.test\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(q.status, 403);
  EXPECT_EQ(q.reason, "method_override_denied");
  // An override the same route allows passes (GET on repos, which allows GET and POST).
  auto ok =
      run("POST /repos/x HTTP/1.1\r\nHost: api.test\r\nX-HTTP-Method-Override: GET\r\n"
          "Content-Length: 0\r\n\r\n");
  EXPECT_EQ(ok.status, 0) << ok.reason;
  // Allowed by another route: refused (the credential and checks of one route only).
  auto other = run("GET /open/x HTTP/1.1\r\nHost: api.test\r\nX-HTTP-Method: POST\r\n\r\n");
  EXPECT_EQ(other.status, 403);
  // A `_method` that only looks alike is not an override.
  auto lookalike = run("GET /repos/x?my_method=DELETE HTTP/1.1\r\nHost: api.test\r\n\r\n");
  EXPECT_EQ(lookalike.status, 0) << lookalike.reason;
}

TEST_F(PipelineTest, HostMustMatchSniAndAbsoluteFormMustNameIt) {
  EXPECT_EQ(run("GET /open/ HTTP/1.1\r\nHost: paste.test\r\n\r\n").reason, "host_sni_mismatch");
  EXPECT_EQ(run("GET /open/ HTTP/1.1\r\nHost: API.TEST:443\r\n\r\n").status, 0);
  EXPECT_EQ(run("GET https://paste.test/open/ HTTP/1.1\r\nHost: api.test\r\n\r\n").reason,
            "absolute_form_host_mismatch");
  EXPECT_EQ(run("GET https://api.test/open/x HTTP/1.1\r\nHost: api.test\r\n\r\n").upstream_target,
            "/open/x");
  EXPECT_EQ(run("GET http://api.test/open/x HTTP/1.1\r\nHost: api.test\r\n\r\n").reason,
            "scheme_mismatch");
  // One trailing dot names the same host: canonicalized, and the upstream gets the canonical.
  auto dot = run("GET /open/ HTTP/1.1\r\nHost: api.test.\r\n\r\n");
  EXPECT_EQ(dot.status, 0) << dot.reason;
  EXPECT_EQ(header(dot, "host"), "api.test");
  EXPECT_EQ(run("GET /open/ HTTP/1.1\r\nHost: api.test..\r\n\r\n").status, 400);
  EXPECT_EQ(run("GET /open/ HTTP/1.1\r\nHost: paste.test\r\n\r\n").status, 421);
  EXPECT_EQ(run("GET /open/ HTTP/1.1\r\nHost: api.test\r\nHost: api.test\r\n\r\n").status, 400);
  EXPECT_EQ(run("GET /open/ HTTP/1.1\r\n\r\n").status, 400);
}

TEST_F(PipelineTest, AmbiguousPathsAreRefused) {
  for (const char* p : {"/open/../admin", "/open/%2e%2e/admin", "/open/..%2fadmin", "/open//x",
                        "/open/%5cx", "/open/%00"}) {
    auto v = run(std::string("GET ") + p + " HTTP/1.1\r\nHost: api.test\r\n\r\n");
    EXPECT_EQ(v.status, 400) << p;
    EXPECT_EQ(v.reason, "ambiguous_path") << p;
  }
}

TEST_F(PipelineTest, SmugglingShapesThatReachThePipelineAreRefused) {
  EXPECT_EQ(run("POST /repos/x HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n"
                "Transfer-Encoding: chunked\r\n\r\n")
                .status,
            400);
  EXPECT_EQ(run("CONNECT api.test:443 HTTP/1.1\r\nHost: api.test\r\n\r\n").reason,
            "nested_connect");
  EXPECT_EQ(run("GET * HTTP/1.1\r\nHost: api.test\r\n\r\n").status, 400);
}

TEST_F(PipelineTest, TokenSwapForBoundDestination) {
  auto v =
      run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + good + "\r\n\r\n");
  ASSERT_EQ(v.status, 0) << v.reason;
  EXPECT_EQ(header(v, "authorization"), "Bearer ghp_REALSECRET");
  EXPECT_EQ(v.token_id, "tok1");
}

TEST_F(PipelineTest, TokenMisuseRevokedAndRequired) {
  conn.host = "paste.test";
  auto v = run("POST /p HTTP/1.1\r\nHost: paste.test\r\nX-Data: " + good + "\r\n\r\n");
  EXPECT_EQ(v.status, 403);
  EXPECT_EQ(v.reason, "token_misuse");
  EXPECT_EQ(v.token_id, "tok1");
  v = run("GET /p?t=" + good + " HTTP/1.1\r\nHost: paste.test\r\n\r\n");
  EXPECT_EQ(v.reason, "token_misuse");
  // A destination without a credential: a token in Authorization is misuse too.
  v = run("GET /p HTTP/1.1\r\nHost: paste.test\r\nAuthorization: Bearer " + good + "\r\n\r\n");
  EXPECT_EQ(v.reason, "token_misuse");
  conn.host = "api.test";
  v = run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + other_sandbox +
          "\r\n\r\n");
  EXPECT_EQ(v.status, 403);
  EXPECT_EQ(v.reason, "token_refused");  // bound to another sandbox
  v = run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + strict_token +
          "\r\n\r\n");
  EXPECT_EQ(v.reason, "token_misuse");  // bound to another credential (of another destination)
  creds.revoke(good);
  v = run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + good + "\r\n\r\n");
  EXPECT_EQ(v.reason, "token_inactive");
  EXPECT_EQ(v.token_id, "tok1");
  conn.host = "strict.test";
  v = run("GET / HTTP/1.1\r\nHost: strict.test\r\n\r\n");
  EXPECT_EQ(v.reason, "token_required");
  v = run("GET / HTTP/1.1\r\nHost: strict.test\r\nX-Api-Key: " + strict_token + "\r\n\r\n");
  EXPECT_EQ(v.status, 0) << v.reason;
  EXPECT_EQ(header(v, "x-api-key"), "sk_STRICT");
}

// design.md §2 step 6: whatever route matched, the headers that ANY credential of the
// destination sets are removed from the client's request; a token in one of them is misuse.
TEST_F(PipelineTest, HeadersOfOtherRoutesCredentialsAreStrippedToo) {
  CredentialSpec second{"second", "strict-key", "X-Api-Key", "{secret}", TokenMode::kOptional};
  policy.destinations[0].routes.push_back({"second", true, {"PUT"}, "/second/", second});
  auto v =
      run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nX-Api-Key: client-own\r\n"
          "x-api-key: again\r\n\r\n");
  ASSERT_EQ(v.status, 0) << v.reason;
  EXPECT_EQ(header(v, "x-api-key"), "<none>");
  EXPECT_EQ(header(v, "authorization"), "Bearer ghp_REALSECRET");
  // Route without any credential: both credential headers of the destination still go.
  v =
      run("GET /open/x HTTP/1.1\r\nHost: api.test\r\nX-Api-Key: k\r\nAuthorization: Bearer b\r\n"
          "\r\n");
  ASSERT_EQ(v.status, 0) << v.reason;
  EXPECT_EQ(header(v, "x-api-key"), "<none>");
  EXPECT_EQ(header(v, "authorization"), "<none>");
  EXPECT_TRUE(v.credential_name.empty());
  EXPECT_NE(std::find(v.dropped_trailers.begin(), v.dropped_trailers.end(), "x-api-key"),
            v.dropped_trailers.end());
  // A valid token for the route's credential, but sent in the other credential's header.
  v = run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nX-Api-Key: " + good + "\r\n\r\n");
  EXPECT_EQ(v.status, 403);
  EXPECT_EQ(v.reason, "token_misuse");
}

// Threat 17: in report mode a denied request goes through, but never with a credential, and
// the client's own credential headers are stripped all the same.
TEST_F(PipelineTest, ReportModeForwardsADeniedRequestStrippedAndWithoutCredential) {
  policy.report_mode = true;
  auto v = run("GET /admin HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer mine\r\n\r\n");
  ASSERT_EQ(v.status, 0) << v.reason;
  EXPECT_TRUE(v.decision.report_only);
  EXPECT_FALSE(v.decision.allow);
  EXPECT_EQ(header(v, "authorization"), "<none>");
  EXPECT_TRUE(v.credential_name.empty());
  EXPECT_TRUE(v.scrub_values.empty());
}

TEST_F(PipelineTest, WebSocketUpgradeIsForwardedAndOtherUpgradesRefused) {
  auto v = run(
      "GET /repos/ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
  ASSERT_EQ(v.status, 0) << v.reason;
  EXPECT_TRUE(v.websocket);
  EXPECT_EQ(header(v, "upgrade"), "websocket");
  EXPECT_EQ(header(v, "connection"), "Upgrade");
  EXPECT_EQ(header(v, "authorization"), "Bearer ghp_REALSECRET");  // checked and injected
  EXPECT_EQ(header(v, "sec-websocket-key"), "dGhlIHNhbXBsZSBub25jZQ==");
  v =
      run("GET /repos/ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade, HTTP2-Settings\r\n"
          "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n");
  EXPECT_EQ(v.status, 403);
  EXPECT_EQ(v.reason, "upgrade_refused");
  // A plain request never carries an Upgrade upstream.
  v = run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\n\r\n");
  EXPECT_NE(v.status, 0);
  // Denied by policy like any request.
  v =
      run("GET /admin HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
          "\r\n");
  EXPECT_EQ(v.status, 403);
}

TEST_F(PipelineTest, PlaintextNeverGetsACredentialUnlessOptedIn) {
  conn.tls = false;
  conn.host.clear();
  conn.port = 80;
  conn.original_destination = "203.0.113.5";
  auto v = run("GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n");
  EXPECT_EQ(v.status, 403);
  EXPECT_EQ(v.reason, "credential_over_plaintext");
  policy.destinations[3].plaintext_credentials = true;
  v = run("GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n");
  EXPECT_EQ(v.status, 0) << v.reason;
  // A Host that gets a credential over TLS only is refused over plain HTTP whatever the IP.
  v = run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n");
  EXPECT_EQ(v.status, 403);
}

TEST_F(PipelineTest, RenderedCredentialWithCrLfOrForbiddenHeaderIsRefused) {
  creds.put_secret("github-pat", "abc\r\nX-Evil: 1");
  auto bad = run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n");
  EXPECT_EQ(bad.reason, "bad_rendered_value");
  EXPECT_EQ(bad.status, 500);
  creds.put_secret("github-pat", "ok");
  policy.destinations[0].routes[1].credential->header = "Proxy-Authorization";
  EXPECT_EQ(run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n").reason,
            "forbidden_credential_header");
  policy.destinations[0].routes[1].credential->header = "Content-Length";
  EXPECT_EQ(run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n").reason,
            "forbidden_credential_header");
}

TEST(ResponseHead, ScrubsSecretValuesAndHopByHop) {
  MessageHead h;
  h.status = 200;
  h.headers = {{"X-Echo", "Bearer ghp_REALSECRET"},
               {"Content-Type", "text/plain"},
               {"Connection", "X-Private"},
               {"X-Private", "1"},
               {"Keep-Alive", "timeout=5"}};
  h.content_length = 3;
  std::string out = render_response_head(h, {"ghp_REALSECRET"}, false);
  EXPECT_EQ(out.find("REALSECRET"), std::string::npos);
  EXPECT_EQ(out.find("X-Private"), std::string::npos);
  EXPECT_NE(out.find("Content-Length: 3\r\n"), std::string::npos);
  EXPECT_NE(out.find("Content-Type: text/plain"), std::string::npos);
  // Encoded echoes are found too (the credential stage's scrub).
  h.headers = {{"X-B64", "Z2hwX1JFQUxTRUNSRVQ="}, {"X-Pct", "ghp%5FREALSECRET"}, {"X-Ok", "1"}};
  out = render_response_head(h, {"ghp_REALSECRET"}, true);
  EXPECT_EQ(out.find("X-B64"), std::string::npos) << out;
  EXPECT_EQ(out.find("X-Pct"), std::string::npos) << out;
  EXPECT_NE(out.find("X-Ok: 1\r\n"), std::string::npos);
  EXPECT_NE(out.find("Connection: close\r\n"), std::string::npos);
}

TEST(ResponseHead, SwitchingProtocolsKeepsUpgrade) {
  MessageHead h;
  h.status = 101;
  h.headers = {{"Upgrade", "websocket"},
               {"Connection", "Upgrade"},
               {"Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="}};
  std::string out = render_response_head(h, {}, true);
  EXPECT_EQ(out.rfind("HTTP/1.1 101 Switching Protocols\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("Upgrade: websocket\r\n"), std::string::npos);
  EXPECT_NE(out.find("Connection: Upgrade\r\n"), std::string::npos);
  EXPECT_NE(out.find("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), std::string::npos);
  EXPECT_EQ(out.find("close"), std::string::npos);
}

// ---- CredentialRound: the same verdicts with lookups that may only answer from a cache -------

// A CredentialSource in front of the fakes whose non-blocking lookups answer only what a
// blocking lookup fetched before (a cold cache that the blocking lookups warm), and which
// counts the blocking lookups.
class ColdCache final : public CredentialSource {
 public:
  explicit ColdCache(const FakeCredentials& inner) : inner_(inner) {}
  Result<std::string> secret_value(std::string_view name) const override {
    ++blocking_;
    warm_.emplace_back(name);
    return inner_.secret_value(name);
  }
  std::optional<TokenInfo> lookup_token(std::string_view token,
                                        std::string_view sandbox_id) const override {
    ++blocking_;
    warm_.emplace_back(token);
    return inner_.lookup_token(token, sandbox_id);
  }
  NonBlocking<Result<std::string>> try_secret_value(std::string_view name) const override {
    if (!is_warm(name)) return NonBlocking<Result<std::string>>::would_block();
    return inner_.secret_value(name);
  }
  NonBlocking<std::optional<TokenInfo>> try_lookup_token(
      std::string_view token, std::string_view sandbox_id) const override {
    if (!is_warm(token)) return NonBlocking<std::optional<TokenInfo>>::would_block();
    return inner_.lookup_token(token, sandbox_id);
  }
  void cool() { warm_.clear(); }
  int blocking() const { return blocking_; }

 private:
  bool is_warm(std::string_view key) const {
    return std::find(warm_.begin(), warm_.end(), key) != warm_.end();
  }
  const FakeCredentials& inner_;
  mutable std::vector<std::string> warm_;
  mutable int blocking_ = 0;
};

class CredentialRoundTest : public PipelineTest {
 protected:
  // What the session does (evaluate_off_io in session.cc), with the fetch run in place.
  Verdict run_rounds(const std::string& raw, const CredentialSource& source, int* fetch_rounds) {
    HttpParser p(HttpParser::Kind::kRequest, limits);
    p.feed(raw.data(), raw.size());
    EXPECT_TRUE(p.head_complete()) << raw;
    head = p.head();
    CredentialRound round(source);
    *fetch_rounds = 0;
    for (int i = 1;; ++i) {
      Verdict v = evaluate_request(policy, round, conn, head);
      if (!round.missing()) return v;
      EXPECT_LT(i, CredentialRound::kMaxCredentialRounds) << raw;
      if (i == CredentialRound::kMaxCredentialRounds) return v;
      round.fetch_missing();
      round.next_evaluation();
      ++*fetch_rounds;
    }
  }
};

TEST_F(CredentialRoundTest, ColdLookupsAreFetchedThenTheVerdictIsTheDirectOne) {
  struct Case {
    std::string host, raw;
    int fetch_rounds;  // with a cold cache
  };
  const std::vector<Case> cases = {
      {"api.test", "GET /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n", 1},  // secret
      {"api.test",
       "GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + good + "\r\n\r\n",
       2},  // token, then the secret it unlocks
      {"api.test",
       "GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + other_sandbox +
           "\r\n\r\n",
       1},  // bound to another sandbox: refused, no secret asked
      {"paste.test", "POST /p HTTP/1.1\r\nHost: paste.test\r\nX-Data: " + good + "\r\n\r\n",
       0},  // misuse: decided by the token's shape, without a lookup
      {"strict.test",
       "GET / HTTP/1.1\r\nHost: strict.test\r\nX-Api-Key: " + strict_token + "\r\n\r\n", 2},
      {"api.test", "GET /open/x HTTP/1.1\r\nHost: api.test\r\n\r\n", 0},  // no credential
  };
  for (const auto& c : cases) {
    conn.host = c.host;
    Verdict direct = run(c.raw);
    ColdCache cold(creds);
    int rounds = 0;
    Verdict v = run_rounds(c.raw, cold, &rounds);
    EXPECT_EQ(rounds, c.fetch_rounds) << c.raw;
    EXPECT_EQ(v.status, direct.status) << c.raw;
    EXPECT_EQ(v.reason, direct.reason) << c.raw;
    EXPECT_EQ(v.token_id, direct.token_id) << c.raw;
    EXPECT_EQ(v.credential_name, direct.credential_name) << c.raw;
    EXPECT_EQ(v.scrub_values, direct.scrub_values) << c.raw;
    EXPECT_EQ(v.upstream_headers, direct.upstream_headers) << c.raw;
    // Warm now: the same request needs no blocking lookup at all.
    int before = cold.blocking();
    Verdict again = run_rounds(c.raw, cold, &rounds);
    EXPECT_EQ(rounds, 0) << c.raw;
    EXPECT_EQ(cold.blocking(), before) << c.raw;
    EXPECT_EQ(again.status, direct.status) << c.raw;
  }
}

// A verdict reached while an answer was missing is never a pass: its placeholders refuse (so a
// caller that forgot to check missing() would still fail closed).
TEST_F(CredentialRoundTest, PlaceholdersFailClosed) {
  ColdCache cold(creds);
  HttpParser p(HttpParser::Kind::kRequest, limits);
  std::string raw = "GET /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n";
  p.feed(raw.data(), raw.size());
  head = p.head();
  CredentialRound round(cold);
  Verdict v = evaluate_request(policy, round, conn, head);
  EXPECT_TRUE(round.missing());
  EXPECT_NE(v.status, 0);
  EXPECT_TRUE(v.scrub_values.empty());
  raw = "GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + good + "\r\n\r\n";
  HttpParser p2(HttpParser::Kind::kRequest, limits);
  p2.feed(raw.data(), raw.size());
  head = p2.head();
  CredentialRound round2(cold);
  v = evaluate_request(policy, round2, conn, head);
  EXPECT_TRUE(round2.missing());
  EXPECT_EQ(v.status, 403);
  EXPECT_EQ(cold.blocking(), 0) << "an evaluation made a blocking lookup";
}

// A revocation between two requests is seen by the next one: fetched answers live only as long
// as one request's round.
TEST_F(CredentialRoundTest, RevocationBetweenRequestsIsSeen) {
  ColdCache cold(creds);
  int rounds = 0;
  std::string raw =
      "GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + good + "\r\n\r\n";
  EXPECT_EQ(run_rounds(raw, cold, &rounds).status, 0);
  creds.revoke(good);
  cold.cool();  // the vault drops its caches on any commit
  Verdict v = run_rounds(raw, cold, &rounds);
  EXPECT_EQ(v.status, 403);
  EXPECT_EQ(v.reason, "token_inactive");
}

TEST(ErrorResponse, IsSmallJson) {
  std::string r = render_error_response(403, "egress_denied", "no-delete", "abc", false);
  EXPECT_NE(r.find("{\"error\":\"egress_denied\",\"request_id\":\"abc\",\"rule\":\"no-delete\"}"),
            std::string::npos);
}

}  // namespace
}  // namespace cordon::gateway
