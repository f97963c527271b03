#include "gateway/adapters/adapters.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <utility>

#include "common/testing/temp_dir.h"

#include "gateway/request_pipeline.h"
#include "gateway/testing/fakes.h"

namespace cordon::gateway::adapters {
namespace {

constexpr std::string_view kRules = R"(
version: 1
credentials:
  - {name: k, secret: key, inject: {header: X-Key}, token: optional}
destinations:
  - id: api
    hosts: [api.example.com]
    routes:
      - {id: deny-admin, action: deny, path: {prefix: /admin/}}
      - {id: get, methods: [GET], credential: k}
  - id: pt
    hosts: [pt.example.net]
    tls: passthrough
profiles:
  p: {destinations: [api, pt]}
)";

std::shared_ptr<const PolicyView> view() {
  auto r = policy::compile_policy(kRules, "test.yaml");
  EXPECT_TRUE(r.ok()) << r.errors_text();
  return make_policy_view(r.policy);
}

TEST(PolicyAdapter, DestinationsDecisionsAndPaths) {
  auto v = view();
  auto d = v->destination("p", "api.example.com", 443);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->id, "api");
  EXPECT_EQ(v->destination("p", "pt.example.net", 443)->tls, TlsMode::kPassthrough);
  EXPECT_FALSE(v->destination("p", "evil.example.com", 443));
  EXPECT_FALSE(v->destination("nope", "api.example.com", 443));

  RequestFacts f;
  f.profile = "p";
  f.host = "api.example.com";
  f.port = 443;
  f.method = "GET";
  f.path = "/repos?x=1";
  Decision dec = v->decide(f);
  EXPECT_TRUE(dec.allow);
  EXPECT_EQ(dec.route, "get");
  ASSERT_TRUE(dec.credential);
  EXPECT_EQ(dec.credential->header, "X-Key");
  EXPECT_EQ(dec.credential->token, TokenMode::kOptional);
  f.path = "/admin/x";
  dec = v->decide(f);
  EXPECT_FALSE(dec.allow);
  EXPECT_EQ(dec.rule, "deny-admin");
  f.method = "POST";
  f.path = "/x";
  EXPECT_FALSE(v->decide(f).allow);

  EXPECT_FALSE(v->canonicalize_path("/a/%2e%2e/b"));
  EXPECT_FALSE(v->canonicalize_path("/a//b"));
  EXPECT_EQ(*v->canonicalize_path("/a/b?q=1"), "/a/b?q=1");
  EXPECT_TRUE(v->address_denied("127.0.0.1"));
  EXPECT_TRUE(v->address_denied("169.254.169.254"));
  EXPECT_TRUE(v->address_denied("10.1.2.3"));
  EXPECT_FALSE(v->address_denied("192.0.2.10"));
}

// Sandbox "sb" of profile "p", intercepted TLS to api.example.com:443.
ConnectionFacts api_connection() {
  ConnectionFacts conn;
  conn.sandbox = {"sb", "p"};
  conn.host = "api.example.com";
  conn.port = 443;
  return conn;
}

TEST(PolicyAdapter, WholePipelineWithRealPolicy) {
  auto v = view();
  testing::FakeCredentials creds;
  creds.put_secret("key", "real-key-value");
  ConnectionFacts conn = api_connection();
  detail::MessageHead h;
  h.method = "GET";
  h.target = "/repos/x";
  h.headers = {{"Host", "api.example.com"}, {"X-Key", "client"}};
  Verdict out = evaluate_request(*v, creds, conn, h);
  ASSERT_EQ(out.status, 0) << out.reason;
  std::string head = render_request_head(h, out);
  EXPECT_NE(head.find("X-Key: real-key-value\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.find("client"), std::string::npos);
}

// The known gap (design.md §2 step 6): the headers of EVERY credential of the destination are
// stripped, whichever route matched, also with the real policy behind the port.
constexpr std::string_view kTwoCredentialRules = R"(
version: 1
credentials:
  - {name: gh, secret: gh-pat, inject: {header: Authorization, format: "Bearer {secret}"}, token: optional}
  - {name: k, secret: key, inject: {header: X-Key}, token: optional}
destinations:
  - id: api
    hosts: [api.example.com]
    routes:
      - {id: open, methods: [GET], path: {prefix: /open/}}
      - {id: keyed, methods: [GET], path: {prefix: /k/}, credential: k}
      - {id: gh, methods: [GET, POST], credential: gh}
profiles:
  p: {destinations: [api]}
)";

TEST(PolicyAdapter, EveryCredentialHeaderOfTheDestinationIsStripped) {
  auto r = policy::compile_policy(kTwoCredentialRules, "two.yaml");
  ASSERT_TRUE(r.ok()) << r.errors_text();
  auto v = make_policy_view(r.policy);
  auto d = v->destination("p", "api.example.com", 443);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->credential_headers, (std::vector<std::string>{"X-Key", "Authorization"}));

  testing::FakeCredentials creds;
  creds.put_secret("key", "real-key-value");
  creds.put_secret("gh-pat", "ghp_real");
  std::string token = testing::FakeCredentials::make_token("t9");
  creds.put_token(token, "t9", "sb", "gh");
  ConnectionFacts conn = api_connection();
  detail::MessageHead h;
  h.method = "GET";
  h.target = "/k/x";
  h.headers = {{"Host", "api.example.com"}, {"X-Key", "client"}, {"authorization", "Bearer mine"}};
  Verdict out = evaluate_request(*v, creds, conn, h);
  ASSERT_EQ(out.status, 0) << out.reason;
  std::string head = render_request_head(h, out);
  EXPECT_NE(head.find("X-Key: real-key-value\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.find("mine"), std::string::npos) << head;  // the other route's credential
  h.target = "/open/x";
  out = evaluate_request(*v, creds, conn, h);
  ASSERT_EQ(out.status, 0) << out.reason;
  head = render_request_head(h, out);
  EXPECT_EQ(head.find("client"), std::string::npos) << head;
  EXPECT_EQ(head.find("mine"), std::string::npos) << head;
  // The gh token on the X-Key route: not its credential's header, so misuse.
  h.target = "/k/x";
  h.headers = {{"Host", "api.example.com"}, {"Authorization", "Bearer " + token}};
  out = evaluate_request(*v, creds, conn, h);
  EXPECT_EQ(out.status, 403);
  EXPECT_EQ(out.reason, "token_misuse");
  // ...and swapped where it belongs.
  h.target = "/repos";
  out = evaluate_request(*v, creds, conn, h);
  ASSERT_EQ(out.status, 0) << out.reason;
  EXPECT_NE(render_request_head(h, out).find("Authorization: Bearer ghp_real\r\n"),
            std::string::npos);
  EXPECT_EQ(out.token_id, "t9");
}

TEST(AuditAdapter, RecordBecomesEventWithoutValues) {
  AuditRecord r;
  r.kind = AuditKind::kRequest;
  r.sandbox = "sb";
  r.decision = AuditDecision::kAllow;
  r.destination = "api";
  r.route = "get";
  r.status = 200;
  r.credential = "k";
  r.token_id = "t1";
  audit::Event e = to_audit_event(r);
  EXPECT_EQ(e.event, "request");
  EXPECT_EQ(e.rule, "api/get");
  bool has_token = false;
  for (auto& [k, v] : e.fields) has_token = has_token || k == "token_id";
  EXPECT_TRUE(has_token);
  r.kind = AuditKind::kConnection;
  // An allowed connection-level record is a passthrough splice, never a refusal.
  EXPECT_EQ(to_audit_event(r).event, "connection_passthrough");
  r.decision = AuditDecision::kDeny;
  EXPECT_EQ(to_audit_event(r).event, "connection_refused");
  r.decision = AuditDecision::kError;  // e.g. the upstream of a passthrough could not be reached
  EXPECT_EQ(to_audit_event(r).event, "connection_refused");
  // A summary line's counts become integer fields.
  r.counts = {{"dns_unlisted", 380}, {"dns_rate_limited", 9600}};
  int64_t unlisted = -1, limited = -1;
  for (auto& [k, v] : to_audit_event(r).fields) {
    if (k == "count.dns_unlisted") unlisted = std::get<int64_t>(v);
    if (k == "count.dns_rate_limited") limited = std::get<int64_t>(v);
  }
  EXPECT_EQ(unlisted, 380);
  EXPECT_EQ(limited, 9600);
}

// The enums changed the record's type, not the log: every kind and decision is written with
// the word it always had (`cordon audit query --event/--decision` match on them).
TEST(AuditAdapter, EventAndDecisionWordsAreTheHistoricOnes) {
  AuditRecord r;
  const std::pair<AuditKind, const char*> kinds[] = {{AuditKind::kRequest, "request"},
                                                     {AuditKind::kConnectionCut, "connection_cut"},
                                                     {AuditKind::kDns, "dns"}};
  for (const auto& [kind, word] : kinds) {
    r.kind = kind;
    EXPECT_EQ(to_audit_event(r).event, word);
  }
  const std::pair<AuditDecision, const char*> decisions[] = {{AuditDecision::kAllow, "allow"},
                                                             {AuditDecision::kDeny, "deny"},
                                                             {AuditDecision::kError, "error"}};
  for (const auto& [decision, word] : decisions) {
    r.kind = AuditKind::kRequest;
    r.decision = decision;
    EXPECT_EQ(to_audit_event(r).decision, word);
    r.kind = AuditKind::kConnection;
    EXPECT_EQ(to_audit_event(r).event,
              decision == AuditDecision::kAllow ? "connection_passthrough" : "connection_refused");
  }
}

TEST(AuditAdapter, DiskBytesOfTheRealWriter) {
  cordon::testing::TempDir dir;
  auto w = audit::Writer::open(audit::WriterOptions{.dir = dir.path()});
  ASSERT_TRUE(w) << w.error().message;
  std::shared_ptr<audit::Writer> writer(std::move(*w));
  auto sink = make_audit_sink(writer);
  AuditRecord r;
  r.kind = AuditKind::kRequest;
  r.decision = AuditDecision::kAllow;
  ASSERT_TRUE(sink->append(r));
  ASSERT_TRUE(writer->flush());
  EXPECT_EQ(sink->disk_bytes(),
            static_cast<int64_t>(std::filesystem::file_size(dir.path() + "/audit.jsonl")));
  EXPECT_GT(sink->disk_bytes(), 0);
}

}  // namespace
}  // namespace cordon::gateway::adapters
