// Credential stage tests. Case names carry the threat number of specs/egress-threats.md.
#include "gateway/stages/credential_injector.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/crypto.h"
#include "common/encoding.h"

namespace cordon::gateway {
namespace {

const std::string kSecret = "ghp_REALSECRETvalue0123456789";

std::string make_token(const std::string& id) {
  return "cdn_" + id + "_" + base64url_encode(random_bytes(32));
}

InjectionSpec github(TokenRequirement mode = TokenRequirement::kOptional) {
  return InjectionSpec{"github", "Authorization", "Bearer {secret}", mode, false};
}

// A fake vault: knows one token for (github, this sandbox), one revoked, one for another
// credential. Records what it was asked.
struct FakeVault {
  std::string good = make_token("t1");
  std::string revoked = make_token("t2");
  std::string other = make_token("t3");
  std::vector<std::string> asked;
  int secret_calls = 0;

  TokenVerifier verifier() {
    return [this](std::string_view token) {
      asked.emplace_back(token);
      TokenVerdict v;
      if (token == good) {
        v.kind = TokenVerdict::Kind::kValid;
        v.token_id = "t1";
      } else if (token == revoked) {
        v.kind = TokenVerdict::Kind::kInactive;
        v.token_id = "t2";
        v.reason = "revoked";
      } else if (token == other) {
        v.kind = TokenVerdict::Kind::kOtherCredential;
        v.token_id = "t3";
      } else {
        v.kind = TokenVerdict::Kind::kRefused;
        v.reason = "unknown";
      }
      return v;
    };
  }
  SecretSource secrets(std::string value = kSecret) {
    return [this, value](std::string_view name) -> Result<std::string> {
      ++secret_calls;
      if (name != "github" && name != "api") return fail("no such credential");
      return value;
    };
  }
};

int count_named(const HeaderList& h, std::string_view name) {
  return int(std::count_if(h.begin(), h.end(),
                           [&](const Header& x) { return ascii_iequals(x.name, name); }));
}

std::string value_of(const HeaderList& h, std::string_view name) {
  for (const auto& x : h) {
    if (ascii_iequals(x.name, name)) return x.value;
  }
  return "<absent>";
}

// Nothing secret in the audit explanation, ever.
void expect_clean_report(const InjectionReport& r, const std::vector<std::string>& secrets) {
  for (const auto& s : secrets) {
    std::string tail = s.size() > 20 ? s.substr(s.size() - 20) : s;
    for (const std::string* field : {&r.reason, &r.detail, &r.token_id, &r.credential}) {
      EXPECT_EQ(field->find(tail), std::string::npos) << *field;
    }
  }
}

TEST(Inject, InjectsWhenNoTokenAndModeOptional) {
  FakeVault vault;
  HeaderList h{{"Host", "api.github.com"}, {"Accept", "*/*"}};
  InjectionSpec spec = github();
  InjectionReport r =
      inject_credentials(h, "/repos/x", &spec, true, vault.secrets(), vault.verifier());
  ASSERT_TRUE(r.allowed) << r.reason << ": " << r.detail;
  EXPECT_EQ(r.action, InjectionAction::kInjected);
  EXPECT_EQ(r.credential, "github");
  EXPECT_EQ(value_of(h, "Authorization"), "Bearer " + kSecret);
  EXPECT_EQ(count_named(h, "Authorization"), 1);
  EXPECT_EQ(value_of(h, "Accept"), "*/*");
  expect_clean_report(r, {kSecret});
}

TEST(Inject, T17_ClientCredentialHeaderIsAlwaysStripped) {
  FakeVault vault;
  HeaderList h{{"Host", "api.github.com"},
               {"authorization", "Bearer attacker-chosen"},
               {"AUTHORIZATION", "Basic eDp5"}};
  InjectionSpec spec = github();
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  ASSERT_TRUE(r.allowed) << r.detail;
  EXPECT_EQ(count_named(h, "Authorization"), 1);
  EXPECT_EQ(value_of(h, "Authorization"), "Bearer " + kSecret);
  EXPECT_EQ(r.stripped_headers.size(), 2u);
}

TEST(Inject, T17_StripOnlyPathForDeniedRequests) {
  FakeVault vault;
  HeaderList h{
      {"Host", "api.github.com"}, {"Authorization", "Bearer " + vault.good}, {"X-Other", "1"}};
  InjectionSpec spec = github();
  InjectionReport r = strip_credentials(h, "/", &spec);
  EXPECT_TRUE(r.allowed);  // a token in the credential's own header is not misuse
  EXPECT_EQ(count_named(h, "Authorization"), 0);
  EXPECT_EQ(count_named(h, "X-Other"), 1);
  EXPECT_EQ(r.action, InjectionAction::kNone);
  EXPECT_TRUE(vault.asked.empty());  // never calls the vault
  EXPECT_EQ(vault.secret_calls, 0);
  // A token elsewhere is still reported (and removed) on the strip-only path.
  HeaderList h2{{"Host", "api.github.com"}, {"X-Leak", vault.good}};
  InjectionReport r2 = strip_credentials(h2, "/", &spec);
  EXPECT_FALSE(r2.allowed);
  EXPECT_EQ(r2.reason, "token_misuse");
  EXPECT_EQ(count_named(h2, "X-Leak"), 0);
  EXPECT_EQ(r2.token_id, "t1");
}

TEST(Inject, T17_OtherCredentialHeadersOfTheDestinationStripped) {
  FakeVault vault;
  InjectionSpec spec = github();
  HeaderList h{{"Host", "api.github.com"}, {"X-Api-Key", "client-chosen"}, {"Accept", "*/*"}};
  InjectionReport r =
      inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier(), {"x-api-key"});
  ASSERT_TRUE(r.allowed) << r.detail;
  EXPECT_EQ(count_named(h, "X-Api-Key"), 0);
  EXPECT_EQ(count_named(h, "Authorization"), 1);
  // Route without a credential on a destination that has one: strip only, no injection.
  HeaderList h2{{"Authorization", "Bearer mine"}, {"Accept", "*/*"}};
  InjectionReport r2 = inject_credentials(h2, "/", nullptr, true, vault.secrets(), vault.verifier(),
                                          {"Authorization"});
  ASSERT_TRUE(r2.allowed);
  EXPECT_EQ(r2.action, InjectionAction::kNone);
  EXPECT_EQ(h2, (HeaderList{{"Accept", "*/*"}}));
  // A token in another credential's header is misuse, also on the strip-only path.
  HeaderList h3{{"X-Api-Key", vault.good}};
  InjectionReport r3 = strip_credentials(h3, "/", &spec, {"X-Api-Key"});
  EXPECT_FALSE(r3.allowed);
  EXPECT_EQ(r3.reason, "token_misuse");
  EXPECT_TRUE(h3.empty());
}

TEST(Inject, SwapsValidTokenInTheCredentialHeader) {
  FakeVault vault;
  HeaderList h{{"Host", "api.github.com"}, {"Authorization", "Bearer " + vault.good}};
  InjectionSpec spec = github();
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  ASSERT_TRUE(r.allowed) << r.reason << ": " << r.detail;
  EXPECT_EQ(r.action, InjectionAction::kSwapped);
  EXPECT_EQ(r.token_id, "t1");
  ASSERT_EQ(vault.asked.size(), 1u);
  EXPECT_EQ(vault.asked[0], vault.good);  // exactly the token, nothing around it
  EXPECT_EQ(value_of(h, "Authorization"), "Bearer " + kSecret);
  expect_clean_report(r, {kSecret, vault.good});
}

TEST(Inject, SwapsTokenGivenAsBasicAuthPassword) {
  FakeVault vault;
  HeaderList h{{"Authorization", "Basic " + base64_encode("x-access-token:" + vault.good)}};
  InjectionSpec spec = github();
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  ASSERT_TRUE(r.allowed) << r.detail;
  EXPECT_EQ(r.action, InjectionAction::kSwapped);
}

TEST(Inject, T18_RequiredTokenAbsent) {
  FakeVault vault;
  HeaderList h{{"Host", "api.github.com"}, {"Authorization", "Bearer not-a-token"}};
  InjectionSpec spec = github(TokenRequirement::kRequired);
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "token_required");
  EXPECT_EQ(count_named(h, "Authorization"), 0);  // stripped although denied
  EXPECT_EQ(vault.secret_calls, 0);
}

TEST(Inject, T18_RequiredTokenPresentIsSwapped) {
  FakeVault vault;
  HeaderList h{{"Authorization", "Bearer " + vault.good}};
  InjectionSpec spec = github(TokenRequirement::kRequired);
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  ASSERT_TRUE(r.allowed) << r.detail;
  EXPECT_EQ(r.action, InjectionAction::kSwapped);
}

TEST(Inject, T20_RevokedTokenRefused) {
  FakeVault vault;
  HeaderList h{{"Authorization", "Bearer " + vault.revoked}};
  InjectionSpec spec = github();
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "token_inactive");
  EXPECT_NE(r.detail.find("revoked"), std::string::npos);
  EXPECT_EQ(r.token_id, "t2");
  EXPECT_EQ(count_named(h, "Authorization"), 0);
  EXPECT_EQ(vault.secret_calls, 0);
}

TEST(Inject, T20_UnknownTokenRefusedAndNoVerifierFailsClosed) {
  FakeVault vault;
  std::string forged = make_token("zz");
  HeaderList h{{"Authorization", "Bearer " + forged}};
  InjectionSpec spec = github();
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  EXPECT_EQ(r.reason, "token_refused");
  HeaderList h2{{"Authorization", "Bearer " + vault.good}};
  InjectionReport r2 = inject_credentials(h2, "/", &spec, true, vault.secrets(), TokenVerifier{});
  EXPECT_FALSE(r2.allowed);
  EXPECT_EQ(r2.reason, "token_refused");
}

TEST(Inject, T19_TokenOfAnotherCredential) {
  FakeVault vault;
  HeaderList h{{"Authorization", "Bearer " + vault.other}};
  InjectionSpec spec = github();
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "token_misuse");
  EXPECT_EQ(r.token_id, "t3");
  EXPECT_EQ(vault.secret_calls, 0);
}

TEST(Inject, TokenWhenModeOffIsMisuse) {
  FakeVault vault;
  HeaderList h{{"Authorization", "Bearer " + vault.good}};
  InjectionSpec spec = github(TokenRequirement::kOff);
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "token_misuse");
}

TEST(Inject, TwoTokensInTheCredentialHeader) {
  FakeVault vault;
  HeaderList h{{"Authorization", "Bearer " + vault.good}, {"Authorization", vault.other}};
  InjectionSpec spec = github();
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "token_misuse");
  EXPECT_TRUE(vault.asked.empty());
}

// Threat 19: a token anywhere but the credential header, or on a destination without a
// credential, is removed and the request denied.
struct MisuseCase {
  const char* name;
  bool with_spec;
  HeaderList headers;
  std::string target;
  const char* removed;  // header expected to be gone, or "" when the target carried it
};

std::vector<MisuseCase> misuse_cases(const std::string& tok) {
  std::string pct_encoded;
  for (char c : tok) {
    if (c == '_')
      pct_encoded += "%5F";
    else
      pct_encoded += c;
  }
  return {
      {"T19_NoCredentialDestination_Bearer",
       false,
       {{"Authorization", "Bearer " + tok}},
       "/",
       "Authorization"},
      {"T19_OtherHeader", true, {{"X-Api-Key", tok}}, "/", "X-Api-Key"},
      {"T19_Cookie", true, {{"Cookie", "a=1; session=" + tok + "; b=2"}}, "/", "Cookie"},
      {"T19_InQuery", true, {}, "/upload?key=" + tok, ""},
      {"T19_InPath", true, {}, "/paste/" + tok, ""},
      {"T19_PercentEncodedQuery", true, {}, "/p?k=" + pct_encoded, ""},
      {"T19_PercentEncodedHeader", true, {{"X-Data", pct_encoded}}, "/", "X-Data"},
      {"T19_BasicAuthOnOtherHeader",
       true,
       {{"Proxy-Foo", "Basic " + base64_encode("user:" + tok)}},
       "/",
       "Proxy-Foo"},
      {"T19_BasicAuthNoCredential",
       false,
       {{"Authorization", "Basic " + base64_encode("user:" + tok)}},
       "/",
       "Authorization"},
      {"T19_Base64UrlInHeader",
       true,
       {{"X-Blob", "eyJ." + base64url_encode("{\"k\":\"" + tok + "\"}") + ".sig"}},
       "/",
       "X-Blob"},
      {"T19_Base64Misaligned",
       true,
       {{"X-Blob", "zz" + base64_encode("...." + tok)}},
       "/",
       "X-Blob"},
      {"T19_UpperCasePrefix", true, {{"X-Key", "CDN_" + tok.substr(4)}}, "/", "X-Key"},
      {"T19_TokenInHeaderName", true, {{tok, "1"}}, "/", ""},
      {"T19_TokenWithSuffix", true, {{"X-Key", tok + "AAAA"}}, "/", "X-Key"},
  };
}

TEST(Inject, T19_TokenMisuseTable) {
  FakeVault vault;
  for (const auto& c : misuse_cases(vault.good)) {
    SCOPED_TRACE(c.name);
    HeaderList h = c.headers;
    h.insert(h.begin(), Header{"Host", "paste.example"});
    InjectionSpec spec = github();
    InjectionReport r = inject_credentials(h, c.target, c.with_spec ? &spec : nullptr, true,
                                           vault.secrets(), vault.verifier());
    EXPECT_FALSE(r.allowed);
    EXPECT_EQ(r.reason, "token_misuse") << r.detail;
    EXPECT_EQ(r.action, InjectionAction::kNone);
    EXPECT_EQ(vault.secret_calls, 0);
    if (std::string(c.removed).size() > 0) {
      EXPECT_EQ(count_named(h, c.removed), 0);
    }
    for (const auto& x : h) {
      EXPECT_EQ(x.value.find(vault.good.substr(4)), std::string::npos) << x.name;
      EXPECT_EQ(x.name.find(vault.good.substr(4)), std::string::npos);
    }
    EXPECT_EQ(count_named(h, "Host"), 1);
    expect_clean_report(r, {vault.good});
    for (const auto& name : r.stripped_headers) {
      EXPECT_EQ(name.find(vault.good.substr(10)), std::string::npos);
    }
    // The strip-only path agrees.
    HeaderList h2 = c.headers;
    InjectionReport s = strip_credentials(h2, c.target, c.with_spec ? &spec : nullptr);
    EXPECT_FALSE(s.allowed);
    EXPECT_EQ(s.reason, "token_misuse");
  }
}

TEST(Inject, NoFalsePositivesOnOrdinaryValues) {
  FakeVault vault;
  HeaderList h{{"Cookie", "cdn_url=https://cdn.example/x; cdn_region=eu"},
               {"X-Trace", "cdn_" + std::string(20, 'a')},
               {"User-Agent", "curl/8.0"},
               {"X-B64", base64_encode(std::string(200, 'x'))}};
  InjectionSpec spec = github();
  InjectionReport r = inject_credentials(h, "/static/cdn_images/logo.png?cdn_v=3", &spec, true,
                                         vault.secrets(), vault.verifier());
  ASSERT_TRUE(r.allowed) << r.detail;
  EXPECT_EQ(count_named(h, "Cookie"), 1);
}

TEST(Inject, TooManyTokensIsMisuse) {
  FakeVault vault;
  HeaderList h;
  for (int i = 0; i < 20; ++i) h.push_back({"X-T" + std::to_string(i), make_token("x")});
  InjectionSpec spec = github();
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "token_misuse");
}

TEST(Inject, T22_PlaintextRefusedUnlessOptedIn) {
  FakeVault vault;
  InjectionSpec spec = github();
  HeaderList h{{"Authorization", "Bearer mine"}};
  InjectionReport r = inject_credentials(h, "/", &spec, false, vault.secrets(), vault.verifier());
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "credential_over_plaintext");
  EXPECT_EQ(count_named(h, "Authorization"), 0);
  EXPECT_EQ(vault.secret_calls, 0);
  spec.allow_plaintext = true;
  HeaderList h2;
  InjectionReport r2 = inject_credentials(h2, "/", &spec, false, vault.secrets(), vault.verifier());
  EXPECT_TRUE(r2.allowed) << r2.detail;
  EXPECT_EQ(r2.action, InjectionAction::kInjected);
}

TEST(Inject, T24_RenderedValueWithControlBytes) {
  for (std::string bad : {std::string("abc\r\nX-Evil: 1"), std::string("abc\n"),
                          std::string("a\rb"), std::string("a\0b", 3), std::string("a\x01")}) {
    FakeVault vault;
    HeaderList h{{"Host", "api.github.com"}};
    InjectionSpec spec = github();
    InjectionReport r =
        inject_credentials(h, "/", &spec, true, vault.secrets(bad), vault.verifier());
    EXPECT_FALSE(r.allowed);
    EXPECT_EQ(r.reason, "bad_rendered_value");
    EXPECT_EQ(count_named(h, "Authorization"), 0);
    EXPECT_EQ(h.size(), 1u);
  }
}

TEST(Inject, T24_ForbiddenInjectionHeaders) {
  for (const char* name :
       {"Host", "content-length", "Transfer-Encoding", "Connection", "Upgrade", "TE", "Trailer",
        "Keep-Alive", "Proxy-Authorization", "proxy-foo", "Bad Name", ""}) {
    SCOPED_TRACE(name);
    FakeVault vault;
    HeaderList h{{"Host", "api.github.com"}, {"Content-Length", "0"}};
    InjectionSpec spec{"github", name, "{secret}", TokenRequirement::kOptional, false};
    InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier());
    EXPECT_FALSE(r.allowed);
    EXPECT_EQ(r.reason, "forbidden_credential_header");
    EXPECT_EQ(value_of(h, "Host"), "api.github.com");  // never stripped nor replaced
    EXPECT_EQ(value_of(h, "Content-Length"), "0");
    EXPECT_EQ(vault.secret_calls, 0);
  }
  EXPECT_TRUE(is_injectable_header("X-Api-Key"));
  EXPECT_TRUE(is_injectable_header("authorization"));
  // The gateway answers Expect itself; a credential must not make the upstream wait for a body.
  EXPECT_FALSE(is_injectable_header("Expect"));
}

TEST(Inject, EmptySecretIsRefusedNotInjected) {
  FakeVault vault;
  InjectionSpec spec = github();
  HeaderList h;
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets(""), vault.verifier());
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "secret_unavailable");
  EXPECT_TRUE(h.empty());
}

TEST(Inject, FormatWithoutPlaceholderAndMissingSecret) {
  FakeVault vault;
  InjectionSpec spec{"github", "Authorization", "Bearer", TokenRequirement::kOptional, false};
  HeaderList h;
  EXPECT_EQ(inject_credentials(h, "/", &spec, true, vault.secrets(), vault.verifier()).reason,
            "credential_spec_invalid");
  InjectionSpec unknown{"nope", "X-Key", "{secret}", TokenRequirement::kOptional, false};
  InjectionReport r = inject_credentials(h, "/", &unknown, true, vault.secrets(), vault.verifier());
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.reason, "secret_unavailable");
  EXPECT_EQ(r.action, InjectionAction::kNone);
  EXPECT_TRUE(h.empty());
}

TEST(Inject, FormatWithSeveralPlaceholders) {
  FakeVault vault;
  InjectionSpec spec{"api", "X-Key", "k={secret};again={secret}", TokenRequirement::kOff, false};
  HeaderList h;
  InjectionReport r = inject_credentials(h, "/", &spec, true, vault.secrets("S"), vault.verifier());
  ASSERT_TRUE(r.allowed);
  EXPECT_EQ(value_of(h, "X-Key"), "k=S;again=S");
}

TEST(FindTokens, IdAndShapes) {
  std::string tok = make_token("AbC123");
  auto found = find_proxy_tokens("Bearer " + tok);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].token, tok);
  EXPECT_EQ(found[0].id, "AbC123");
  EXPECT_TRUE(find_proxy_tokens("cdn_abc_" + std::string(36, 'x')).empty());  // too short
  // Detection is deliberately loose (fails closed): 45+ base64url characters after the prefix
  // count even without the id/secret structure; the id is then unknown.
  auto loose = find_proxy_tokens("cdn_" + std::string(45, 'x'));
  ASSERT_EQ(loose.size(), 1u);
  EXPECT_EQ(loose[0].id, "");
  EXPECT_TRUE(find_proxy_tokens("").empty());
  EXPECT_TRUE(find_proxy_tokens("cdn_").empty());
  // Same token twice counts once.
  EXPECT_EQ(find_proxy_tokens(tok + " " + tok).size(), 1u);
  EXPECT_EQ(find_proxy_tokens(tok + " " + make_token("b")).size(), 2u);
}

TEST(Scrub, T23_EchoedSecretRemovedFromResponseHeaders) {
  HeaderList h{
      {"Content-Type", "application/json"},
      {"X-Echo-Authorization", "Bearer " + kSecret},
      {"X-Echo-Basic", "Basic " + base64_encode("user:" + kSecret)},
      {"X-Echo-B64url", base64url_encode(kSecret)},
      {"Set-Cookie", "s=" + base64_encode("zz" + kSecret + "zz") + "; Path=/"},
      {"Location", "https://x.example/?k=" + std::string("ghp%5FREALSECRETvalue0123456789")},
      {"X-Ok", "nothing here"}};
  auto removed = scrub_response_headers(h, {"", kSecret});
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].name, "Content-Type");
  EXPECT_EQ(h[1].name, "X-Ok");
  ASSERT_EQ(removed.size(), 5u);
  EXPECT_EQ(removed[0].name, "X-Echo-Authorization");
  EXPECT_EQ(removed[0].form, "raw");
  EXPECT_EQ(removed[1].form, "base64");
  EXPECT_EQ(removed[4].form, "percent-encoded");
}

// The layers of a header are decoded once for all secrets (the shortest secret's word bound):
// each secret must still be found in every form, whatever the other secrets' lengths, in the
// name as in the value, and a header that holds none of them stays.
TEST(Scrub, SecretsOfDifferentLengthsShareDecodedLayers) {
  const std::string short_secret = "s3cr3t-short";
  const std::string long_secret = "Bearer " + kSecret + "-and-then-some-more-bytes";
  for (const std::vector<std::string>& secrets :
       {std::vector<std::string>{short_secret, long_secret},
        std::vector<std::string>{long_secret, short_secret}}) {
    HeaderList h{{"X-Long-B64", "v=" + base64_encode("x" + long_secret)},
                 {"X-Short-B64url", base64url_encode("ab" + short_secret)},
                 {"X-" + base64url_encode(short_secret + "...."), "name carries it"},
                 {"X-Pct", "a%3D" + long_secret.substr(0, 6) + "%20" + long_secret.substr(7)},
                 {"X-Short-Word", base64_encode(short_secret.substr(0, 6))},
                 {"X-Ok", base64_encode(std::string(60, 'q'))}};
    auto removed = scrub_response_headers(h, secrets);
    ASSERT_EQ(removed.size(), 4u);
    EXPECT_EQ(removed[0].name, "X-Long-B64");
    EXPECT_EQ(removed[0].form, "base64");
    EXPECT_EQ(removed[1].form, "base64");
    EXPECT_EQ(removed[2].form, "base64");
    EXPECT_EQ(removed[3].form, "percent-encoded");
    ASSERT_EQ(h.size(), 2u);
    EXPECT_EQ(h[0].name, "X-Short-Word");
    EXPECT_EQ(h[1].name, "X-Ok");
  }
}

TEST(Scrub, NoSecretsNoChange) {
  HeaderList h{{"A", "b"}, {"C", "d"}};
  EXPECT_TRUE(scrub_response_headers(h, {}).empty());
  EXPECT_TRUE(scrub_response_headers(h, {"zzz-not-there"}).empty());
  EXPECT_EQ(h.size(), 2u);
}

}  // namespace
}  // namespace cordon::gateway

namespace cordon::gateway {
namespace {

TEST(AuditRedaction, TokensLoseTheirSecretPartWhereverTheyAre) {
  const std::string token = make_token("0123456789abcdef");
  const std::string secret_part = token.substr(token.rfind('_') + 1);
  std::string path = "/v1/x?access_token=" + token + "&b=" + token;
  EXPECT_TRUE(redact_for_audit(path, {}));
  EXPECT_EQ(path,
            "/v1/x?access_token=cdn_0123456789abcdef_[redacted]&b=cdn_0123456789abcdef_"
            "[redacted]");
  // Upper-case prefix, and one percent-encoded byte: the decoded layer still holds it.
  std::string upper = "CDN_" + token.substr(4);
  EXPECT_TRUE(redact_for_audit(upper, {}));
  EXPECT_EQ(upper.find(secret_part), std::string::npos) << upper;
  std::string encoded = "/p/%63" + token.substr(1);
  EXPECT_TRUE(redact_for_audit(encoded, {}));
  EXPECT_EQ(encoded, "[redacted]");
  std::string plain = "/repos/a/b";
  EXPECT_FALSE(redact_for_audit(plain, {}));
  EXPECT_EQ(plain, "/repos/a/b");
}

TEST(AuditRedaction, KnownSecretValuesAreReplaced) {
  std::string path = "/echo/" + kSecret + "/x";
  EXPECT_TRUE(redact_for_audit(path, {kSecret}));
  EXPECT_EQ(path, "/echo/[secret]/x");
  std::string pct = "/echo/ghp%5FREALSECRETvalue0123456789";
  EXPECT_TRUE(redact_for_audit(pct, {kSecret}));
  EXPECT_EQ(pct, "[redacted]");
  std::string other = "/echo/nothing";
  EXPECT_FALSE(redact_for_audit(other, {kSecret, ""}));
}

}  // namespace
}  // namespace cordon::gateway
