// Decisions: the compiled policy answering requests, against rules.example.yaml and small
// inline files.
#include "policy/policy.h"

#include <gtest/gtest.h>

#include "policy/path.h"

namespace cordon::policy {
namespace {

std::shared_ptr<const Policy> compile_ok(std::string_view yaml) {
  auto r = compile_policy(yaml, "test.yaml");
  EXPECT_TRUE(r.ok()) << r.errors_text();
  return r.policy;
}

std::shared_ptr<const Policy> example() {
  auto r = load_policy_file(CORDON_RULES_EXAMPLE);
  EXPECT_TRUE(r.ok()) << r.errors_text();
  return r.policy;
}

Decision ask(const Policy& p, std::string_view profile, std::string_view method,
             std::string_view host, std::string_view path, std::uint16_t port = 443,
             bool tls = true) {
  return p.decide(Request{profile, host, port, method, path, tls});
}

TEST(Example, LintsClean) {
  auto p = example();
  ASSERT_TRUE(p);
  EXPECT_EQ(p->mode(), Mode::kEnforce);
  EXPECT_EQ(p->dns_unlisted(), DnsUnlisted::kNxdomain);
  EXPECT_TRUE(p->has_profile("coding-agent"));
  EXPECT_TRUE(p->has_profile("model-only"));
}

TEST(Example, ModelApiGetsInjectedKey) {
  auto p = example();
  ASSERT_TRUE(p);
  auto d = ask(*p, "coding-agent", "POST", "api.anthropic.com", "/v1/messages");
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.verdict);
  EXPECT_EQ(d.reason, Reason::kRouteAllowed);
  EXPECT_EQ(d.destination, "anthropic-api");
  EXPECT_EQ(d.route, "messages");
  ASSERT_NE(d.credential, nullptr);
  EXPECT_EQ(d.credential->name, "anthropic");
  EXPECT_EQ(d.credential->secret, "anthropic-api-key");
  EXPECT_EQ(d.credential->header, "x-api-key");
  EXPECT_EQ(d.credential->format, "{secret}");
  EXPECT_EQ(d.credential->token, TokenMode::kOff);
  // The file upload route is denied by name.
  d = ask(*p, "coding-agent", "POST", "api.anthropic.com", "/v1/files");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kRouteDenied);
  EXPECT_EQ(d.route, "no-file-upload");
  EXPECT_EQ(d.credential, nullptr);
  // GET on the messages endpoint matches no route.
  d = ask(*p, "coding-agent", "GET", "api.anthropic.com", "/v1/messages");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kNoRouteMatched);
  EXPECT_EQ(d.route, "");
}

TEST(Example, GithubReadOnlyWithRequiredToken) {
  auto p = example();
  ASSERT_TRUE(p);
  auto d = ask(*p, "coding-agent", "GET", "api.github.com", "/repos/acme/app/pulls");
  EXPECT_TRUE(d.allowed);
  ASSERT_NE(d.credential, nullptr);
  EXPECT_EQ(d.credential->token, TokenMode::kRequired);
  EXPECT_EQ(d.credential->format, "Bearer {secret}");
  d = ask(*p, "coding-agent", "DELETE", "api.github.com", "/repos/acme/app");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.credential, nullptr);
  d = ask(*p, "coding-agent", "POST", "github.com", "/acme/app/git-receive-pack");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.route, "no-push");
  d = ask(*p, "coding-agent", "POST", "github.com", "/acme/app/git-upload-pack");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.route, "git-fetch");
  EXPECT_EQ(d.credential, nullptr);
  d = ask(*p, "coding-agent", "PUT", "uploads.github.com", "/repos/a/b/releases/1/assets");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.route, "no-release-upload");
}

TEST(Example, RegistriesGetOnlyAndProfiles) {
  auto p = example();
  ASSERT_TRUE(p);
  EXPECT_TRUE(ask(*p, "coding-agent", "GET", "registry.npmjs.org", "/left-pad").allowed);
  EXPECT_FALSE(ask(*p, "coding-agent", "PUT", "registry.npmjs.org", "/left-pad").allowed);
  EXPECT_TRUE(ask(*p, "coding-agent", "GET", "files.pythonhosted.org", "/packages/x.whl").allowed);
  EXPECT_FALSE(ask(*p, "coding-agent", "POST", "upload.pypi.org", "/legacy/").allowed);
  EXPECT_FALSE(ask(*p, "coding-agent", "POST", "pypi.org", "/legacy/").allowed);
  // model-only has nothing but the model API.
  auto d = ask(*p, "model-only", "GET", "registry.npmjs.org", "/left-pad");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kHostNotAllowed);
  EXPECT_TRUE(ask(*p, "model-only", "POST", "api.anthropic.com", "/v1/messages").allowed);
  d = ask(*p, "nobody", "GET", "registry.npmjs.org", "/");
  EXPECT_EQ(d.reason, Reason::kUnknownProfile);
  // Wildcards: one label below golang.org, not the apex.
  EXPECT_TRUE(ask(*p, "coding-agent", "GET", "dl.golang.org", "/x").allowed);
  EXPECT_FALSE(ask(*p, "coding-agent", "GET", "golang.org", "/x").allowed);
  EXPECT_FALSE(ask(*p, "coding-agent", "GET", "a.b.golang.org", "/x").allowed);
}

TEST(Example, ConnectionLevelAndDns) {
  auto p = example();
  ASSERT_TRUE(p);
  auto c = p->match_connection("coding-agent", "API.GitHub.com.", 443);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->destination, "github-api");
  EXPECT_EQ(c->tls, TlsMode::kIntercept);
  EXPECT_EQ(c->plaintext, Plaintext::kDeny);
  EXPECT_FALSE(p->match_connection("coding-agent", "api.github.com", 80).has_value());
  EXPECT_FALSE(p->match_connection("coding-agent", "evil.example", 443).has_value());
  EXPECT_FALSE(p->match_connection("model-only", "api.github.com", 443).has_value());
  c = p->match_connection("coding-agent", "a.b.telemetry.example.com", 443);
  EXPECT_FALSE(c.has_value());  // pinned-telemetry is in no profile
  EXPECT_TRUE(p->host_reachable("coding-agent", "pypi.org"));
  EXPECT_FALSE(p->host_reachable("coding-agent", "paste.example"));
  EXPECT_FALSE(p->host_reachable("model-only", "pypi.org"));
  EXPECT_FALSE(p->host_reachable("nobody", "pypi.org"));
  EXPECT_FALSE(p->host_reachable("coding-agent", ""));
}

TEST(Example, Floors) {
  auto p = example();
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->address_denied("127.0.0.1"));
  EXPECT_TRUE(p->address_denied("169.254.169.254"));
  EXPECT_TRUE(p->address_denied("::ffff:169.254.169.254"));
  EXPECT_TRUE(p->address_denied("64:ff9b::a9fe:a9fe"));
  EXPECT_TRUE(p->address_denied("2002:c0a8:0101::1"));  // 6to4 of 192.168.1.1
  EXPECT_TRUE(p->address_denied("100.64.0.1"));
  EXPECT_TRUE(p->address_denied("::1"));
  EXPECT_TRUE(p->address_denied("not an address"));  // fail closed
  EXPECT_TRUE(p->address_denied(""));
  EXPECT_FALSE(p->address_denied("203.0.113.10"));
  EXPECT_FALSE(p->address_denied("2001:db8::10"));
  EXPECT_TRUE(p->address_denied(IpAddress::v4(0x0A000001)));
}

constexpr std::string_view kSmall = R"(
version: 1
credentials:
  - {name: k, secret: key, inject: {header: X-Key}, token: optional}
destinations:
  - id: exact
    hosts: [api.example.com]
    ports: [443, 8443]
    routes:
      - {id: deny-admin, action: deny, path: {prefix: /admin/}}
      - {id: get, methods: [GET], credential: k}
      - {id: any-other, path: {glob: "/other/**"}}
  - id: wild
    hosts: ["*.example.com"]
    routes:
      - {id: all}
  - id: deep
    hosts: ["**.example.com"]
    routes:
      - {id: all}
  - id: plain
    hosts: [plain.example.net]
    ports: [80, 443]
    plaintext: allow
    routes:
      - {id: with-cred, path: {prefix: /cred/}, credential: k}
      - {id: all}
  - id: plain-cred
    hosts: [plaincred.example.net]
    ports: [80]
    plaintext: allow_with_credentials
    routes:
      - {id: all, credential: k}
  - id: passthrough
    hosts: [pt.example.net]
    tls: passthrough
profiles:
  p: {destinations: [exact, wild, deep, plain, plain-cred, passthrough]}
  q: {destinations: [wild]}
)";

TEST(Decide, SpecificityAndPorts) {
  auto p = compile_ok(kSmall);
  ASSERT_TRUE(p);
  EXPECT_EQ(ask(*p, "p", "GET", "api.example.com", "/x").destination, "exact");
  EXPECT_EQ(ask(*p, "p", "GET", "www.example.com", "/x").destination, "wild");
  EXPECT_EQ(ask(*p, "p", "GET", "a.b.example.com", "/x").destination, "deep");
  EXPECT_EQ(ask(*p, "p", "GET", "example.com", "/x").reason, Reason::kHostNotAllowed);
  // q lacks "exact": api.example.com falls to the one-label wildcard.
  EXPECT_EQ(ask(*p, "q", "GET", "api.example.com", "/x").destination, "wild");
  EXPECT_EQ(ask(*p, "p", "GET", "api.example.com", "/x", 8443).destination, "exact");
  // Port 8443 is only on "exact": a different port falls through to the wildcard only if
  // that destination lists the port.
  auto d = ask(*p, "p", "GET", "www.example.com", "/x", 8443);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kPortNotAllowed);
  d = ask(*p, "p", "GET", "api.example.com", "/x", 9999);
  EXPECT_EQ(d.reason, Reason::kPortNotAllowed);
  d = ask(*p, "p", "GET", "api.example.com", "/x", 0);
  EXPECT_EQ(d.reason, Reason::kPortNotAllowed);
}

TEST(Decide, RoutesInOrderFirstMatchWins) {
  auto p = compile_ok(kSmall);
  ASSERT_TRUE(p);
  auto d = ask(*p, "p", "GET", "api.example.com", "/admin/users");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.route, "deny-admin");
  d = ask(*p, "p", "GET", "api.example.com", "/users");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.route, "get");
  ASSERT_NE(d.credential, nullptr);
  EXPECT_EQ(d.credential->token, TokenMode::kOptional);
  d = ask(*p, "p", "POST", "api.example.com", "/users");
  EXPECT_EQ(d.reason, Reason::kNoRouteMatched);
  d = ask(*p, "p", "POST", "api.example.com", "/other/a/b");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.route, "any-other");
  EXPECT_EQ(d.credential, nullptr);
  // Unknown and lower-case methods only match routes without `methods`.
  EXPECT_EQ(ask(*p, "p", "get", "api.example.com", "/users").reason, Reason::kNoRouteMatched);
  EXPECT_EQ(ask(*p, "p", "PROPFIND", "api.example.com", "/other/x").route, "any-other");
}

TEST(Decide, PlaintextNeedsOptIn) {
  auto p = compile_ok(kSmall);
  ASSERT_TRUE(p);
  // A TLS-only destination refuses plain HTTP even on an allowed port.
  auto d = ask(*p, "p", "GET", "api.example.com", "/users", 443, false);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kPlaintextNotAllowed);
  d = ask(*p, "p", "GET", "plain.example.net", "/x", 80, false);
  EXPECT_TRUE(d.allowed);
  d = ask(*p, "p", "GET", "plain.example.net", "/cred/x", 80, false);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kCredentialNeedsTls);
  EXPECT_EQ(d.credential, nullptr);
  d = ask(*p, "p", "GET", "plain.example.net", "/cred/x", 443, true);
  EXPECT_TRUE(d.allowed);
  EXPECT_NE(d.credential, nullptr);
  d = ask(*p, "p", "GET", "plaincred.example.net", "/x", 80, false);
  EXPECT_TRUE(d.allowed);
  EXPECT_NE(d.credential, nullptr);
}

TEST(Decide, PassthroughAndBadInput) {
  auto p = compile_ok(kSmall);
  ASSERT_TRUE(p);
  auto d = ask(*p, "p", "GET", "pt.example.net", "/");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kPassthrough);
  EXPECT_EQ(d.tls, TlsMode::kPassthrough);
  auto c = p->match_connection("p", "pt.example.net", 443);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->tls, TlsMode::kPassthrough);
  EXPECT_EQ(ask(*p, "p", "GET", "api.example.com", "users").reason, Reason::kPathNotCanonical);
  EXPECT_EQ(ask(*p, "p", "GET", "api.example.com", "").reason, Reason::kPathNotCanonical);
  EXPECT_EQ(ask(*p, "p", "GET", std::string_view("api.example.com\0x", 17), "/").reason,
            Reason::kInvalidHost);
  EXPECT_EQ(ask(*p, "p", "GET", "api.example.com:443", "/").reason, Reason::kInvalidHost);
  EXPECT_EQ(ask(*p, "p", "GET", std::string(300, 'a'), "/").reason, Reason::kInvalidHost);
  EXPECT_EQ(ask(*p, "p", "GET", "", "/").reason, Reason::kInvalidHost);
}

TEST(Decide, ReportModeLetsThroughButKeepsVerdict) {
  std::string yaml(kSmall);
  yaml.replace(yaml.find("version: 1"), 10, "version: 1\nmode: report");
  auto p = compile_ok(yaml);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->mode(), Mode::kReport);
  auto d = ask(*p, "p", "GET", "api.example.com", "/admin/x");
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.verdict);
  EXPECT_EQ(d.reason, Reason::kRouteDenied);
  EXPECT_EQ(d.route, "deny-admin");
  EXPECT_EQ(d.credential, nullptr);
  d = ask(*p, "p", "GET", "evil.example.org", "/");
  EXPECT_TRUE(d.allowed);
  EXPECT_FALSE(d.verdict);
  d = ask(*p, "p", "GET", "plain.example.net", "/cred/x", 80, false);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.credential, nullptr);  // no secret over plaintext, even in report mode
  d = ask(*p, "p", "GET", "api.example.com", "/users");
  EXPECT_TRUE(d.verdict);
  EXPECT_NE(d.credential, nullptr);
  // Floors still hold in report mode.
  EXPECT_TRUE(p->address_denied("127.0.0.1"));
}

TEST(Decide, DefaultFloorsWhenOmittedAndExplicitFloorsAsWritten) {
  auto p = compile_ok(kSmall);  // no floors section
  ASSERT_TRUE(p);
  for (const char* ip :
       {"127.0.0.1", "10.2.3.4", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.1.1",
        "0.0.0.0", "::", "::1", "fd00::1", "fe80::1", "::ffff:10.0.0.1"})
    EXPECT_TRUE(p->address_denied(ip)) << ip;
  EXPECT_FALSE(p->address_denied("198.51.100.1"));
  std::string yaml(kSmall);
  yaml.replace(yaml.find("version: 1"), 10, "version: 1\nfloors: {deny_cidrs: [198.51.100.0/24]}");
  auto q = compile_ok(yaml);
  ASSERT_TRUE(q);
  EXPECT_TRUE(q->address_denied("198.51.100.1"));
  EXPECT_TRUE(q->address_denied("::ffff:198.51.100.1"));
  EXPECT_FALSE(q->address_denied("10.0.0.1"));
}

TEST(Decide, CanonicalizedPathAgainstPrefixRule) {
  // The gateway's flow: canonicalize, then decide. "/other/../admin/" must hit deny-admin.
  auto p = compile_ok(kSmall);
  ASSERT_TRUE(p);
  auto c = canonicalize_target("/other/../admin/x?y=1");
  ASSERT_TRUE(c.has_value());
  auto d = ask(*p, "p", "POST", "api.example.com", c->path);
  EXPECT_EQ(d.route, "deny-admin");
  EXPECT_FALSE(canonicalize_target("/other/..%2fadmin/x").has_value());
}

TEST(Decide, ManyDestinationsStillExact) {
  std::string yaml = "version: 1\ndestinations:\n";
  for (int i = 0; i < 2000; ++i) {
    yaml += "  - {id: d" + std::to_string(i) + ", hosts: [h" + std::to_string(i) +
            ".example.com, \"*.w" + std::to_string(i) + ".example.org\"], routes: [{id: r}]}\n";
  }
  yaml += "profiles:\n  p:\n    destinations: [";
  for (int i = 0; i < 2000; i += 2) yaml += (i ? ", d" : "d") + std::to_string(i);
  yaml += "]\n";
  auto p = compile_ok(yaml);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->destination_count(), 2000u);
  for (int i : {0, 2, 998, 1998}) {
    EXPECT_EQ(ask(*p, "p", "GET", "h" + std::to_string(i) + ".example.com", "/").destination,
              "d" + std::to_string(i));
    EXPECT_EQ(ask(*p, "p", "GET", "x.w" + std::to_string(i) + ".example.org", "/").destination,
              "d" + std::to_string(i));
  }
  EXPECT_FALSE(ask(*p, "p", "GET", "h1.example.com", "/").allowed);  // not in the profile
  EXPECT_FALSE(ask(*p, "p", "GET", "x.w1.example.org", "/").allowed);
}

TEST(Overlay, OnlyNarrows) {
  auto p = example();
  ASSERT_TRUE(p);
  auto o = Overlay::compile({"**.github.com", "api.anthropic.com", "github.com"},
                            {"uploads.github.com"});
  ASSERT_TRUE(o.has_value()) << o.error().message;
  const Overlay* ov = o->get();
  auto d = p->decide(Request{"coding-agent", "api.github.com", 443, "GET", "/repos/a/b", true}, ov);
  EXPECT_TRUE(d.allowed);
  d = p->decide(Request{"coding-agent", "registry.npmjs.org", 443, "GET", "/x", true}, ov);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kOverlayDenied);
  d = p->decide(Request{"coding-agent", "uploads.github.com", 443, "GET", "/x", true}, ov);
  EXPECT_EQ(d.reason, Reason::kOverlayDenied);
  // Allowing a host the profile does not list widens nothing.
  auto wide = Overlay::compile({"**.example.org"}, {});
  ASSERT_TRUE(wide.has_value());
  d = p->decide(Request{"coding-agent", "x.example.org", 443, "GET", "/", true}, wide->get());
  EXPECT_EQ(d.reason, Reason::kHostNotAllowed);
  EXPECT_FALSE(p->match_connection("coding-agent", "pypi.org", 443, ov).has_value());
  EXPECT_TRUE(p->match_connection("coding-agent", "github.com", 443, ov).has_value());
  EXPECT_FALSE(p->host_reachable("coding-agent", "pypi.org", ov));
  EXPECT_TRUE(p->host_reachable("coding-agent", "api.anthropic.com", ov));
  EXPECT_TRUE(ov->permits("API.GitHub.com."));
  EXPECT_FALSE(ov->permits(""));
  auto empty_allow = Overlay::compile({}, {"pypi.org"});
  ASSERT_TRUE(empty_allow.has_value());
  EXPECT_TRUE(p->host_reachable("coding-agent", "registry.npmjs.org", empty_allow->get()));
  EXPECT_FALSE(p->host_reachable("coding-agent", "pypi.org", empty_allow->get()));
  EXPECT_FALSE(Overlay::compile({"10.0.0.0/8"}, {}).has_value());
  EXPECT_FALSE(Overlay::compile({}, {"b\xc3\xbc"
                                     "cher.example"})
                   .has_value());
}

TEST(Overlay, DenialHoldsInReportMode) {
  std::string yaml(kSmall);
  yaml.replace(yaml.find("version: 1"), 10, "version: 1\nmode: report");
  auto p = compile_ok(yaml);
  ASSERT_TRUE(p);
  auto o = Overlay::compile({}, {"api.example.com"});
  ASSERT_TRUE(o.has_value());
  auto d = p->decide(Request{"p", "api.example.com", 443, "GET", "/users", true}, o->get());
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, Reason::kOverlayDenied);
}

TEST(Decide, ManyProfilesAndPorts) {
  // Profiles past the 64 kept as bits on each destination use the membership table.
  std::string yaml = "version: 1\ndestinations:\n";
  for (int i = 0; i < 70; ++i)
    yaml += "  - {id: d" + std::to_string(i) + ", hosts: [h" + std::to_string(i) +
            ".example.com], ports: [1, 2, 3, 4, 5, " + std::to_string(1000 + i) +
            "], routes: [{id: r}]}\n";
  yaml += "profiles:\n";
  for (int i = 0; i < 70; ++i)
    yaml += "  p" + std::to_string(i) + ": {destinations: [d" + std::to_string(i) + "]}\n";
  auto p = compile_ok(yaml);
  ASSERT_TRUE(p);
  for (int i : {0, 1, 63, 64, 69}) {
    const std::string prof = "p" + std::to_string(i);
    const std::string host = "h" + std::to_string(i) + ".example.com";
    const auto port = static_cast<std::uint16_t>(1000 + i);
    EXPECT_TRUE(ask(*p, prof, "GET", host, "/", port).allowed) << prof;
    EXPECT_TRUE(ask(*p, prof, "GET", host, "/", 5).allowed) << prof;
    EXPECT_EQ(ask(*p, prof, "GET", host, "/", 6).reason, Reason::kPortNotAllowed) << prof;
    const std::string other = "h" + std::to_string(i == 69 ? 0 : 69) + ".example.com";
    EXPECT_EQ(ask(*p, prof, "GET", other, "/", 5).reason, Reason::kHostNotAllowed) << prof;
    EXPECT_TRUE(p->host_reachable(prof, host));
    EXPECT_FALSE(p->host_reachable(prof, other));
  }
}

}  // namespace
}  // namespace cordon::policy
