// End-to-end, transparent mode (design.md §2, §6): a sandbox namespace whose traffic to any
// address on TCP 80/443 is steered by nftables TPROXY, in a gateway namespace, to the gateway's
// IP_TRANSPARENT listener; the gateway's io threads live in that namespace too and reach a
// fake-internet namespace holding the fake upstreams. No namespace has a route to the machine's
// real interfaces. Everything is removed afterwards. Needs root (SKIPPED otherwise).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <sys/stat.h>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "gateway/gateway.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"
#include "tests/e2e/gateway/e2e_util.h"

namespace cordon::gateway {
namespace {

using testing::FakeCredentials;
using testing::FakePolicy;
using testing::FakeSandboxes;
using testing::FakeUpstream;

constexpr const char* kSecret = "ghp_TRANSPARENT_SECRET_42";

int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

// Runs `body` with the calling thread inside network namespace `ns`.
template <class F>
bool in_netns(const std::string& ns, F body) {
  int self = ::open("/proc/thread-self/ns/net", O_RDONLY);
  int target = ::open(("/run/netns/" + ns).c_str(), O_RDONLY);
  if (self < 0 || target < 0 || ::setns(target, CLONE_NEWNET) != 0) {
    if (self >= 0) ::close(self);
    if (target >= 0) ::close(target);
    return false;
  }
  body();
  bool back = ::setns(self, CLONE_NEWNET) == 0;
  ::close(self);
  ::close(target);
  return back;
}

class TransparentE2E : public e2e::GatewayFixture {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, nftables TPROXY)";
    if (sh("command -v nft") != 0 || sh("command -v ip") != 0 || sh("command -v curl") != 0) {
      GTEST_SKIP() << "needs nft, ip and curl";
    }
    std::string id = std::to_string(::getpid());
    sb = "cgw-sb-" + id;
    gw = "cgw-gw-" + id;
    inet = "cgw-in-" + id;
    ASSERT_NO_FATAL_FAILURE(make_tmp("cordon-gw-tp"));
    created = true;
    // sandbox (192.0.2.2) <-> gateway (192.0.2.1 | 198.51.100.1) <-> internet (198.51.100.10)
    const std::string cmds[] = {
        "ip netns add " + sb,
        "ip netns add " + gw,
        "ip netns add " + inet,
        "ip -n " + sb + " link add v-sb type veth peer name v-gw-sb netns " + gw,
        "ip -n " + gw + " link add v-gw-in type veth peer name v-in netns " + inet,
        "ip -n " + sb + " addr add 192.0.2.2/24 dev v-sb",
        "ip -n " + gw + " addr add 192.0.2.1/24 dev v-gw-sb",
        "ip -n " + gw + " addr add 198.51.100.1/24 dev v-gw-in",
        "ip -n " + inet + " addr add 198.51.100.10/24 dev v-in",
        "ip -n " + sb + " link set lo up",
        "ip -n " + sb + " link set v-sb up",
        "ip -n " + gw + " link set lo up",
        "ip -n " + gw + " link set v-gw-sb up",
        "ip -n " + gw + " link set v-gw-in up",
        "ip -n " + inet + " link set lo up",
        "ip -n " + inet + " link set v-in up",
        "ip -n " + sb + " route add default via 192.0.2.1",
        "ip -n " + gw + " rule add fwmark 0x1 lookup 100",
        "ip -n " + gw + " route add local 0.0.0.0/0 dev lo table 100",
    };
    for (const auto& c : cmds) ASSERT_EQ(sh(c), 0) << c;

    make_certs();
    ASSERT_TRUE(in_netns(inet, [&] {
      use_upstream(std::make_unique<FakeUpstream>(
          std::vector<std::string>{"api.test", "paste.test", "pt.test"}, true, 443, true));
      plain = std::make_unique<FakeUpstream>(std::vector<std::string>{}, false, 80, true);
    }));

    CredentialSpec gh{"github", "github-pat", "Authorization", "Bearer {secret}",
                      TokenMode::kOptional};
    policy = std::make_shared<FakePolicy>();
    policy->denied_prefixes = {"10.", "127.", "169.254."};
    policy->destinations = {
        {"api",
         {"api.test"},
         {443},
         TlsMode::kIntercept,
         false,
         {{"echo", true, {"GET", "POST"}, "/echo", gh}}},
        {"plain",
         {"plain.test", "api.test"},
         {80},
         TlsMode::kIntercept,
         false,
         {{"cred", true, {}, "/cred", gh}, {"any", true, {}, "", std::nullopt}}},
        {"pt", {"pt.test"}, {443}, TlsMode::kPassthrough, false, {}},
    };
    policy->profiles["default"] = {"api", "plain", "pt"};
    sandboxes = std::make_shared<FakeSandboxes>();
    sandboxes->add("sbx", "unused", "default", "192.0.2.2");
    creds = std::make_shared<FakeCredentials>();
    creds->put_secret("github-pat", kSecret);

    GatewayOptions opts = loopback_options(2);
    opts.resolve = {{"api.test", "198.51.100.10"},
                    {"paste.test", "198.51.100.10"},
                    {"plain.test", "198.51.100.10"},
                    {"pt.test", "198.51.100.10"}};
    ASSERT_NO_FATAL_FAILURE(create_gateway(opts, {certs, sandboxes, creds, audit}, policy));
    Result<uint16_t> port = fail("not run");
    // The listener and the io threads are created inside the gateway namespace.
    ASSERT_TRUE(in_netns(gw, [&] {
      port = gateway->listen_transparent("127.0.0.1:0");
      if (port) gateway->start();
    }));
    ASSERT_TRUE(port) << port.error().message;
    // ("fwd" is an nft keyword: the chain is called "forward_drop".)
    std::string nft =
        "table ip cordon_test { chain pre { type filter hook prerouting priority mangle; "
        "iifname \"v-gw-sb\" meta l4proto tcp tcp dport { 80, 443 } tproxy to 127.0.0.1:" +
        std::to_string(*port) +
        " meta mark set 1 accept; }; chain forward_drop { type filter hook forward priority 0; "
        "iifname \"v-gw-sb\" drop; }; }\n";
    std::string nft_file = tmp + "/rules.nft";
    FILE* f = std::fopen(nft_file.c_str(), "w");
    std::fputs(nft.c_str(), f);
    std::fclose(f);
    ASSERT_EQ(sh("ip netns exec " + gw + " nft -f " + nft_file), 0) << nft;
  }

  void TearDown() override {
    stop_gateway();
    plain.reset();
    if (created) {
      for (const auto& ns : {sb, gw, inet}) sh("ip netns del " + ns);
    }
    GatewayFixture::TearDown();
  }

  e2e::CurlResult sandbox_curl(std::vector<std::string> args) {
    std::vector<std::string> all = {"--cacert", gateway_ca, "--connect-timeout", "5"};
    all.insert(all.end(), args.begin(), args.end());
    // run_curl execs "curl"; prefix through ip netns exec via a wrapper script.
    std::string wrapper = tmp + "/curl-in-sandbox";
    FILE* f = std::fopen(wrapper.c_str(), "w");
    std::fprintf(f, "#!/bin/sh\nexec ip netns exec %s /usr/bin/curl \"$@\"\n", sb.c_str());
    std::fclose(f);
    ::chmod(wrapper.c_str(), 0700);
    return e2e::run_curl_with(wrapper, all, tmp);
  }
  std::vector<AuditRecord> with_reason(const std::string& r) {
    return e2e::records_where(*audit, [&](const AuditRecord& a) { return a.reason == r; });
  }

  bool created = false;
  std::string sb, gw, inet;
  std::unique_ptr<FakeUpstream> plain;
  std::shared_ptr<FakePolicy> policy;
  std::shared_ptr<FakeSandboxes> sandboxes;
  std::shared_ptr<FakeCredentials> creds;
};

TEST_F(TransparentE2E, InterceptsTlsToAnyAddressAndResolvesItself) {
  // The sandbox dials an address of its choosing; the gateway ignores it and resolves api.test.
  auto r = sandbox_curl({"--resolve", "api.test:443:203.0.113.7", "https://api.test/echo"});
  ASSERT_EQ(r.exit_code, 0) << r.body;
  EXPECT_EQ(r.http_code, 200);
  auto heads = upstream->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find(std::string("Bearer ") + kSecret), std::string::npos);
  EXPECT_EQ(r.headers.find(kSecret), std::string::npos);
  auto recs = audit->records();
  ASSERT_FALSE(recs.empty());
  EXPECT_EQ(recs.back().sandbox, "sbx");
  EXPECT_EQ(recs.back().dst, "203.0.113.7:443");
  EXPECT_EQ(recs.back().sni, "api.test");
}

TEST_F(TransparentE2E, SniNotInProfileOrMissingIsRefused) {
  auto r = sandbox_curl({"--resolve", "evil.test:443:203.0.113.7", "https://evil.test/"});
  EXPECT_NE(r.exit_code, 0);
  r = sandbox_curl({"https://203.0.113.7/"});  // IP literal: no SNI
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(with_reason("no_destination").size(), 1u);  // as the explicit proxy names it
  EXPECT_EQ(with_reason("no_sni").size(), 1u);
  EXPECT_TRUE(upstream->heads().empty());
}

TEST_F(TransparentE2E, PlainHttpChecksHostAndNeverInjects) {
  auto r = sandbox_curl({"--resolve", "plain.test:80:203.0.113.9", "http://plain.test/echo"});
  EXPECT_EQ(r.http_code, 200);
  r = sandbox_curl({"--resolve", "plain.test:80:203.0.113.9", "http://plain.test/cred"});
  EXPECT_EQ(r.http_code, 403);
  // A Host that gets a credential over TLS, sent in plain HTTP to an attacker address.
  r = sandbox_curl({"-H", "Host: api.test", "http://203.0.113.66/echo"});
  EXPECT_EQ(r.http_code, 200);  // api.test:80 has a no-credential route here...
  for (const auto& h : plain->heads()) EXPECT_EQ(h.find(kSecret), std::string::npos);
  r = sandbox_curl({"-H", "Host: evil.test", "http://203.0.113.66/"});
  EXPECT_EQ(r.http_code, 403);
}

TEST_F(TransparentE2E, PassthroughSplicesWithoutDecryptingOrInjecting) {
  // The sandbox verifies the upstream's own certificate: the gateway did not terminate TLS.
  auto r = sandbox_curl({"--cacert", upstream_ca, "--resolve", "pt.test:443:203.0.113.7", "-H",
                         "Authorization: Bearer sandbox-own", "https://pt.test/echo"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.http_code, 200);
  auto heads = upstream->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find("sandbox-own"), std::string::npos);
  EXPECT_EQ(heads[0].find(kSecret), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto recs = with_reason("passthrough");
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_GT(recs[0].bytes_down, 0u);
  EXPECT_EQ(recs[0].sni, "pt.test");
}

// No proxy token (and no secret the gateway knows) reaches the audit log, over TLS or plain.
TEST_F(TransparentE2E, TokensInTheTargetNeverReachTheAuditLog) {
  const std::string token = FakeCredentials::make_token("tokx");
  const std::string secret_part = token.substr(token.rfind('_') + 1);
  creds->put_token(token, "tokx", "sbx", "github");
  auto r = sandbox_curl(
      {"--resolve", "api.test:443:203.0.113.7", "https://api.test/echo?access_token=" + token});
  EXPECT_EQ(r.http_code, 403);
  r = sandbox_curl({"--resolve", "plain.test:80:203.0.113.9", "http://plain.test/x/" + token});
  EXPECT_EQ(r.http_code, 403);
  r = sandbox_curl(
      {"--resolve", "api.test:443:203.0.113.7", std::string("https://api.test/echo/") + kSecret});
  EXPECT_EQ(r.http_code, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(with_reason("token_misuse").size(), 2u);
  for (const auto& a : audit->records()) {
    for (const std::string* f :
         {&a.src, &a.dst, &a.sni, &a.host, &a.method, &a.path, &a.rule, &a.reason, &a.token_id}) {
      EXPECT_EQ(f->find(secret_part), std::string::npos) << *f;
      EXPECT_EQ(f->find(kSecret), std::string::npos) << *f;
    }
  }
}

TEST_F(TransparentE2E, OtherPortsAreNotForwarded) {
  auto r = sandbox_curl({"--max-time", "3", "http://203.0.113.7:8080/"});
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace cordon::gateway
