#include "gateway/request_pipeline.h"

#include <gtest/gtest.h>

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
    creds.put_token("cdn_pt_good", "tok1", "sb1", "github");
    creds.put_token("cdn_pt_other_sandbox", "tok2", "sb2", "github");
    creds.put_token("cdn_pt_strict", "tok3", "sb1", "strict");
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

TEST_F(PipelineTest, HostMustMatchSniAndAbsoluteFormMustNameIt) {
  EXPECT_EQ(run("GET /open/ HTTP/1.1\r\nHost: paste.test\r\n\r\n").reason, "host_sni_mismatch");
  EXPECT_EQ(run("GET /open/ HTTP/1.1\r\nHost: API.TEST:443\r\n\r\n").status, 0);
  EXPECT_EQ(run("GET https://paste.test/open/ HTTP/1.1\r\nHost: api.test\r\n\r\n").reason,
            "absolute_form_host_mismatch");
  EXPECT_EQ(run("GET https://api.test/open/x HTTP/1.1\r\nHost: api.test\r\n\r\n").upstream_target,
            "/open/x");
  EXPECT_EQ(run("GET http://api.test/open/x HTTP/1.1\r\nHost: api.test\r\n\r\n").reason,
            "absolute_form_scheme");
  EXPECT_EQ(run("GET /open/ HTTP/1.1\r\nHost: api.test.\r\n\r\n").status, 400);
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
      run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer cdn_pt_good\r\n\r\n");
  ASSERT_EQ(v.status, 0) << v.reason;
  EXPECT_EQ(header(v, "authorization"), "Bearer ghp_REALSECRET");
  EXPECT_EQ(v.token_id, "tok1");
}

TEST_F(PipelineTest, TokenMisuseRevokedAndRequired) {
  conn.host = "paste.test";
  auto v = run("POST /p HTTP/1.1\r\nHost: paste.test\r\nX-Data: cdn_pt_good\r\n\r\n");
  EXPECT_EQ(v.status, 403);
  EXPECT_EQ(v.reason, "token_misuse");
  v = run("GET /p?t=cdn_pt_good HTTP/1.1\r\nHost: paste.test\r\n\r\n");
  EXPECT_EQ(v.reason, "token_misuse");
  conn.host = "api.test";
  v =
      run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer "
          "cdn_pt_other_sandbox\r\n\r\n");
  EXPECT_EQ(v.reason, "token_misuse");
  v = run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer cdn_pt_strict\r\n\r\n");
  EXPECT_EQ(v.reason, "token_misuse");  // bound to another credential
  creds.revoke("cdn_pt_good");
  v = run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer cdn_pt_good\r\n\r\n");
  EXPECT_EQ(v.reason, "token_inactive");
  conn.host = "strict.test";
  v = run("GET / HTTP/1.1\r\nHost: strict.test\r\n\r\n");
  EXPECT_EQ(v.reason, "token_required");
  v = run("GET / HTTP/1.1\r\nHost: strict.test\r\nX-Api-Key: cdn_pt_strict\r\n\r\n");
  EXPECT_EQ(v.status, 0) << v.reason;
  EXPECT_EQ(header(v, "x-api-key"), "sk_STRICT");
}

TEST_F(PipelineTest, PlaintextNeverGetsACredentialUnlessOptedIn) {
  conn.tls = false;
  conn.host.clear();
  conn.port = 80;
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
  EXPECT_EQ(run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n").reason,
            "credential_value_invalid");
  creds.put_secret("github-pat", "ok");
  policy.destinations[0].routes[1].credential->header = "Proxy-Authorization";
  EXPECT_EQ(run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n").reason,
            "credential_header_forbidden");
  policy.destinations[0].routes[1].credential->header = "Content-Length";
  EXPECT_EQ(run("GET /repos/x HTTP/1.1\r\nHost: api.test\r\n\r\n").reason,
            "credential_header_forbidden");
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
}

TEST(ErrorResponse, IsSmallJson) {
  std::string r = render_error_response(403, "egress_denied", "no-delete", "abc", false);
  EXPECT_NE(r.find("{\"error\":\"egress_denied\",\"request_id\":\"abc\",\"rule\":\"no-delete\"}"),
            std::string::npos);
}

}  // namespace
}  // namespace cordon::gateway
