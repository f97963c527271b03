// TLS decision stage tests: every refusal with its name, the actions per phase, and the same
// refusal named the same on the explicit-proxy and the transparent path.
#include "gateway/stages/tls_decision.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace cordon::gateway {
namespace {

// A policy of two destinations, as the gateway's lookup would answer for one sandbox.
struct Destinations {
  std::map<std::pair<std::string, uint16_t>, DestinationTls> table = {
      {{"api.example.com", 443}, DestinationTls::kIntercept},
      {{"bank.example.com", 443}, DestinationTls::kPassthrough},
      {{"api.example.com", 8443}, DestinationTls::kIntercept},
  };
  std::vector<std::pair<std::string, uint16_t>> asked;
  DestinationLookup lookup = [this](std::string_view host, uint16_t port) {
    asked.emplace_back(std::string(host), port);
    auto it = table.find({std::string(host), port});
    return it == table.end() ? std::nullopt : std::optional<DestinationTls>(it->second);
  };
};

TlsFacts at_connect(std::string_view host, uint16_t port = 443) {
  return TlsFacts{TlsPhase::kConnect, std::nullopt, host, port};
}

TlsFacts transparent_hello(std::optional<std::string_view> sni, uint16_t port = 443) {
  return TlsFacts{TlsPhase::kClientHello, sni, std::nullopt, port};
}

TlsFacts proxied_hello(std::optional<std::string_view> sni, std::string_view connect_host) {
  return TlsFacts{TlsPhase::kClientHello, sni, connect_host, 443};
}

TlsFacts in_handshake(std::optional<std::string_view> sni,
                      std::optional<std::string_view> connect_host = std::nullopt) {
  return TlsFacts{TlsPhase::kHandshake, sni, connect_host, 443};
}

TEST(TlsDecisionStage, SameRefusalSameReasonOnExplicitAndTransparentPaths) {
  // A host that no destination takes. The explicit proxy refuses it at CONNECT, the transparent
  // listener after peeking the hello, the servername callback inside a handshake: one word.
  Destinations d;
  TlsDecision explicit_proxy = decide_tls(at_connect("evil.example"), &d.lookup);
  TlsDecision transparent = decide_tls(transparent_hello("evil.example"), &d.lookup);
  TlsDecision handshake = decide_tls(in_handshake("evil.example"), &d.lookup);
  for (const auto* r : {&explicit_proxy, &transparent, &handshake}) {
    EXPECT_EQ(r->action, TlsAction::kRefuse);
    EXPECT_EQ(r->refusal, TlsRefusal::kNoDestination);
    EXPECT_EQ(r->host, "evil.example");
  }
  EXPECT_EQ(explicit_proxy.reason(), transparent.reason());
  EXPECT_EQ(transparent.reason(), handshake.reason());
  EXPECT_EQ(explicit_proxy.reason(), "no_destination");

  // A port the destination does not list is the same refusal.
  EXPECT_EQ(decide_tls(at_connect("api.example.com", 444), &d.lookup).reason(), "no_destination");
  EXPECT_EQ(decide_tls(transparent_hello("api.example.com", 444), &d.lookup).reason(),
            "no_destination");
}

TEST(TlsDecisionStage, ConnectPhaseDecidesOnTheConnectHost) {
  Destinations d;
  auto i = decide_tls(at_connect("api.example.com"), &d.lookup);
  EXPECT_EQ(i.action, TlsAction::kIntercept);
  EXPECT_EQ(i.refusal, TlsRefusal::kNone);
  EXPECT_EQ(i.reason(), "");
  EXPECT_EQ(i.host, "api.example.com");
  auto p = decide_tls(at_connect("bank.example.com"), &d.lookup);
  EXPECT_EQ(p.action, TlsAction::kPassthrough);
  // The port is the CONNECT port, passed on to the lookup as given.
  EXPECT_EQ(decide_tls(at_connect("api.example.com", 8443), &d.lookup).action,
            TlsAction::kIntercept);
  ASSERT_EQ(d.asked.size(), 3u);
  EXPECT_EQ(d.asked.back(), std::make_pair(std::string("api.example.com"), uint16_t{8443}));
  // No CONNECT host: nothing takes it.
  TlsFacts none{TlsPhase::kConnect, std::nullopt, std::nullopt, 443};
  EXPECT_EQ(decide_tls(none, &d.lookup).refusal, TlsRefusal::kNoDestination);
}

TEST(TlsDecisionStage, HelloWithoutSniIsRefused) {
  Destinations d;
  auto r = decide_tls(transparent_hello(std::nullopt), &d.lookup);
  EXPECT_EQ(r.action, TlsAction::kRefuse);
  EXPECT_EQ(r.reason(), "no_sni");
  EXPECT_TRUE(r.host.empty());
  EXPECT_EQ(decide_tls(proxied_hello(std::nullopt, "bank.example.com"), &d.lookup).reason(),
            "no_sni");
  EXPECT_EQ(decide_tls(in_handshake(std::nullopt), &d.lookup).reason(), "no_sni");
  EXPECT_TRUE(d.asked.empty());  // refused before the policy is asked
}

TEST(TlsDecisionStage, SniThatIsNoHostNameIsRefused) {
  Destinations d;
  for (std::string_view bad :
       {"api.example.com:443", "[2001:db8::1]", "", "a..b", "user@api.example.com"}) {
    auto r = decide_tls(in_handshake(bad), &d.lookup);
    EXPECT_EQ(r.action, TlsAction::kRefuse) << bad;
    EXPECT_EQ(r.reason(), "invalid_sni") << bad;
    EXPECT_TRUE(r.host.empty()) << bad;
  }
  EXPECT_TRUE(d.asked.empty());
}

TEST(TlsDecisionStage, SniIsCanonicalizedBeforeTheLookup) {
  Destinations d;
  auto r = decide_tls(in_handshake("API.Example.COM"), &d.lookup);
  EXPECT_EQ(r.action, TlsAction::kIntercept);
  EXPECT_EQ(r.host, "api.example.com");
  ASSERT_EQ(d.asked.size(), 1u);
  EXPECT_EQ(d.asked[0].first, "api.example.com");
}

TEST(TlsDecisionStage, SniMustNameTheConnectHost) {
  Destinations d;
  auto r = decide_tls(proxied_hello("api.example.com", "bank.example.com"), &d.lookup);
  EXPECT_EQ(r.action, TlsAction::kRefuse);
  EXPECT_EQ(r.reason(), "sni_connect_mismatch");
  EXPECT_EQ(r.host, "api.example.com");  // the checked SNI, audited as such
  EXPECT_EQ(decide_tls(in_handshake("api.example.com", "bank.example.com"), &d.lookup).reason(),
            "sni_connect_mismatch");
  EXPECT_TRUE(d.asked.empty());
  auto ok = decide_tls(proxied_hello("bank.example.com", "bank.example.com"), &d.lookup);
  EXPECT_EQ(ok.action, TlsAction::kPassthrough);
}

TEST(TlsDecisionStage, PeekedHelloMayInterceptOrPassThrough) {
  Destinations d;
  EXPECT_EQ(decide_tls(transparent_hello("api.example.com"), &d.lookup).action,
            TlsAction::kIntercept);
  EXPECT_EQ(decide_tls(transparent_hello("bank.example.com"), &d.lookup).action,
            TlsAction::kPassthrough);
}

TEST(TlsDecisionStage, InsideTheHandshakePassthroughIsTooLate) {
  // E.g. a reload made the destination passthrough between the peek and the handshake.
  Destinations d;
  auto r = decide_tls(in_handshake("bank.example.com"), &d.lookup);
  EXPECT_EQ(r.action, TlsAction::kRefuse);
  EXPECT_EQ(r.reason(), "passthrough_not_intercepted");
  EXPECT_EQ(r.host, "bank.example.com");
  EXPECT_EQ(decide_tls(in_handshake("api.example.com"), &d.lookup).action, TlsAction::kIntercept);
}

TEST(TlsDecisionStage, NoPolicyFailsClosedAfterTheSniChecks) {
  EXPECT_EQ(decide_tls(in_handshake("api.example.com"), nullptr).reason(), "policy_not_loaded");
  EXPECT_EQ(decide_tls(at_connect("api.example.com"), nullptr).reason(), "policy_not_loaded");
  DestinationLookup empty;
  EXPECT_EQ(decide_tls(transparent_hello("api.example.com"), &empty).reason(), "policy_not_loaded");
  // A bad SNI is named as such whatever the policy state.
  EXPECT_EQ(decide_tls(in_handshake(std::nullopt), nullptr).reason(), "no_sni");
  EXPECT_EQ(decide_tls(in_handshake("a:1"), nullptr).reason(), "invalid_sni");
}

TEST(TlsDecisionStage, RefusalNamesAreStable) {
  // Audit lines and their readers depend on these words.
  EXPECT_EQ(tls_refusal_name(TlsRefusal::kNone), "");
  EXPECT_EQ(tls_refusal_name(TlsRefusal::kNoSni), "no_sni");
  EXPECT_EQ(tls_refusal_name(TlsRefusal::kInvalidSni), "invalid_sni");
  EXPECT_EQ(tls_refusal_name(TlsRefusal::kSniConnectMismatch), "sni_connect_mismatch");
  EXPECT_EQ(tls_refusal_name(TlsRefusal::kPolicyNotLoaded), "policy_not_loaded");
  EXPECT_EQ(tls_refusal_name(TlsRefusal::kNoDestination), "no_destination");
  EXPECT_EQ(tls_refusal_name(TlsRefusal::kPassthroughNotIntercepted),
            "passthrough_not_intercepted");
}

}  // namespace
}  // namespace cordon::gateway
