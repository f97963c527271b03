// End-to-end: the gateway in explicit-proxy mode on loopback, with curl or a raw TLS client as
// the sandbox and a fake upstream TLS server (own CA) as the internet. Every packet stays on
// loopback; names resolve through the gateway's static map only.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "ca/ca.h"
#include "ca/leaf_cache.h"
#include "common/encoding.h"
#include "gateway/adapters/adapters.h"
#include "gateway/gateway.h"
#include "gateway/testing/fake_dns.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"
#include "tests/e2e/gateway/e2e_util.h"

namespace cordon::gateway {
namespace {

using e2e::count_of;
using e2e::RawClient;
using testing::FakeCredentials;
using testing::FakeDns;
using testing::FakePolicy;
using testing::FakeSandboxes;
using testing::FakeUpstream;

constexpr const char* kSecret = "ghp_REALSECRET_0123456789";
// A proxy token of the real shape (cdn_<id>_<43 base64url>), found by the credential stage.
const std::string kGoodToken = FakeCredentials::make_token("tok1");

class GatewayE2E : public e2e::GatewayFixture {
 protected:
  void SetUp() override {
    // Raw TLS writes to a peer that closed must fail, not kill the test.
    std::signal(SIGPIPE, SIG_IGN);
    if (std::system("curl --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "curl not installed";
    ASSERT_NO_FATAL_FAILURE(make_tmp("cordon-gw-e2e"));
    start_upstream({"api.test", "paste.test", "private.test", "imds.test", "down.test", "pt.test"});
    plain_upstream = std::make_unique<FakeUpstream>(std::vector<std::string>{}, false);
    untrusted = std::make_unique<FakeUpstream>(std::vector<std::string>{"untrusted.test"});
    make_certs();

    uint16_t up = upstream->port();
    down_port = e2e::free_port();
    CredentialSpec gh{"github", "github-pat", "Authorization", "Bearer {secret}",
                      TokenMode::kOptional};
    policy = std::make_shared<FakePolicy>();
    policy->denied_prefixes = {"10.", "169.254.", "192.168."};
    policy->destinations = {
        {"api",
         {"api.test"},
         {up},
         TlsMode::kIntercept,
         false,
         {{"no-delete", false, {"DELETE"}, "", std::nullopt},
          {"admin", false, {}, "/admin", std::nullopt},
          {"echo", true, {"GET", "POST", "HEAD"}, "/echo", gh},
          {"data", true, {"GET", "POST", "PUT"}, "/", std::nullopt}}},
        {"paste",
         {"paste.test"},
         {up},
         TlsMode::kIntercept,
         false,
         {{"any", true, {}, "", std::nullopt}}},
        {"private",
         {"private.test", "imds.test", "loop.test"},
         {up},
         TlsMode::kIntercept,
         false,
         {{"any", true, {}, "", std::nullopt}}},
        {"down",
         {"down.test"},
         {down_port},
         TlsMode::kIntercept,
         false,
         {{"any", true, {}, "", std::nullopt}}},
        {"untrusted",
         {"untrusted.test"},
         {untrusted->port()},
         TlsMode::kIntercept,
         false,
         {{"any", true, {}, "", std::nullopt}}},
        {"plain",
         {"plain.test"},
         {plain_upstream->port()},
         TlsMode::kIntercept,
         false,
         {{"cred", true, {}, "/cred", gh}, {"any", true, {}, "", std::nullopt}}},
        {"pt", {"pt.test"}, {up}, TlsMode::kPassthrough, false, {}},
    };
    policy->profiles["default"] = {"api", "paste", "private", "down", "untrusted", "plain", "pt"};

    sandboxes = std::make_shared<FakeSandboxes>();
    sandboxes->add("sb1", "secret1", "default");
    sandboxes->add("sb2", "secret2", "default");
    creds = std::make_shared<FakeCredentials>();
    creds->put_secret("github-pat", kSecret);
    creds->put_token(kGoodToken, "tok1", "sb1", "github");

    GatewayOptions opts = loopback_options(2);
    opts.resolve = {
        {"api.test", "127.0.0.1"},        {"paste.test", "127.0.0.1"}, {"private.test", "10.0.0.1"},
        {"imds.test", "169.254.169.254"}, {"loop.test", "127.0.0.1"},  {"down.test", "127.0.0.1"},
        {"untrusted.test", "127.0.0.1"},  {"plain.test", "127.0.0.1"}, {"pt.test", "127.0.0.1"}};
    opts.limits.header_read_timeout_ms = 800;
    customize(opts);
    std::shared_ptr<CertProvider> cert_provider = certs;
    customize_certs(cert_provider);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(create_gateway(opts, {cert_provider, sandboxes, creds, audit}, policy));
    ASSERT_NO_FATAL_FAILURE(listen_proxy());
    auto a = gateway->listen_admin("127.0.0.1:0");
    ASSERT_TRUE(a) << a.error().message;
    admin_addr = *a;
    gateway->start();
  }
  virtual void customize(GatewayOptions&) {}
  // May replace the leaf provider (and rewrite gateway_ca to its root).
  virtual void customize_certs(std::shared_ptr<CertProvider>&) {}

  std::string api(const std::string& path, const std::string& host = "api.test") {
    return upstream_url(host, path);
  }
  e2e::CurlResult curl(std::vector<std::string> args, const std::string& auth = "sb1:secret1") {
    return proxy_curl(args, auth);
  }
  // A TLS connection through the tunnel, SNI = host.
  std::unique_ptr<RawClient> tunnel(const std::string& host, const std::string& sni,
                                    bool* tls_ok = nullptr) {
    auto c = open_tunnel(host, "sb1:secret1");
    bool ok = c->start_tls(sni, gateway_ca);
    if (tls_ok) *tls_ok = ok;
    return c;
  }
  // The newest audit record; waits briefly, since a response can reach the client just before
  // the gateway writes its line.
  AuditRecord last_record() {
    for (int i = 0; i < 100; ++i) {
      auto recs = audit->records();
      if (recs.size() > seen_records_) {
        // Let a line still being written land.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        recs = audit->records();
        seen_records_ = recs.size();
        return recs.back();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "no new audit record";
    return {};
  }
  size_t seen_records_ = 0;
  // The gateway audits a refused connection after it has closed it, so the client can see the
  // refusal first: wait (bounded) until `at_least` matching records are there.
  std::vector<AuditRecord> audit_with_reason(const std::string& reason, size_t at_least = 1) {
    return e2e::wait_records(
        *audit, [&](const AuditRecord& r) { return r.reason == reason; }, at_least);
  }
  std::string admin_get(const std::string& path) {
    RawClient c;
    uint16_t port = static_cast<uint16_t>(std::stoi(admin_addr.substr(admin_addr.rfind(':') + 1)));
    EXPECT_TRUE(c.connect_tcp(port));
    c.send("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
    return c.read_until_close();
  }

  std::string admin_addr;
  uint16_t down_port = 0;
  std::unique_ptr<FakeUpstream> plain_upstream, untrusted;
  std::shared_ptr<FakePolicy> policy;
  std::shared_ptr<FakeSandboxes> sandboxes;
  std::shared_ptr<FakeCredentials> creds;
};

TEST_F(GatewayE2E, AllowedGetInjectsCredentialSeenByUpstreamNeverByClient) {
  auto r = curl({api("/echo?q=1"), "-H", "Authorization: Bearer client-supplied"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.http_code, 200);
  EXPECT_NE(r.body.find("GET /echo?q=1 HTTP/1.1"), std::string::npos) << r.body;
  auto heads = upstream->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find(std::string("Authorization: Bearer ") + kSecret), std::string::npos)
      << heads[0];
  EXPECT_EQ(heads[0].find("client-supplied"), std::string::npos);
  EXPECT_EQ(heads[0].find("Proxy-Authorization"), std::string::npos);
  // The upstream echoed Authorization in a response header: scrubbed.
  EXPECT_EQ(r.headers.find(kSecret), std::string::npos) << r.headers;
  EXPECT_EQ(r.body.find(kSecret), std::string::npos);
  const auto rec = last_record();
  EXPECT_EQ(rec.decision, AuditDecision::kAllow);
  EXPECT_EQ(rec.sandbox, "sb1");
  EXPECT_EQ(rec.sni, "api.test");
  EXPECT_EQ(rec.route, "echo");
  EXPECT_EQ(rec.credential, "github");
  EXPECT_EQ(rec.status, 200);
  EXPECT_EQ(rec.path, "/echo?q=1");
}

TEST_F(GatewayE2E, AllowedPostContentLengthAndChunked) {
  std::string file = tmp + "/upload.bin";
  {
    std::ofstream f(file, std::ios::binary);
    for (int i = 0; i < 300000; ++i) f.put(static_cast<char>(i * 7));
  }
  uint32_t sum = 0;
  for (int i = 0; i < 300000; ++i) sum += static_cast<unsigned char>(static_cast<char>(i * 7));
  std::string want = "bytes=300000 sum=" + std::to_string(sum);
  auto r = curl({api("/upload"), "--data-binary", "@" + file});
  EXPECT_EQ(r.http_code, 200);
  EXPECT_NE(r.body.find(want), std::string::npos) << r.body;
  r = curl({api("/upload"), "-H", "Transfer-Encoding: chunked", "--data-binary", "@" + file});
  EXPECT_EQ(r.http_code, 200);
  EXPECT_NE(r.body.find(want), std::string::npos) << r.body;
  auto heads = upstream->heads();
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_NE(heads[1].find("Transfer-Encoding: chunked"), std::string::npos);
  // Expect: 100-continue was answered by the gateway, never forwarded.
  EXPECT_EQ(heads[0].find("Expect"), std::string::npos);
}

TEST_F(GatewayE2E, DeniedHostMethodPathGetJson403) {
  auto r = curl({api("/x", "evil.test")});
  EXPECT_NE(r.exit_code, 0);  // CONNECT refused
  EXPECT_EQ(r.http_code, 403);
  r = curl({api("/echo"), "-X", "DELETE"});
  EXPECT_EQ(r.http_code, 403);
  EXPECT_NE(r.body.find("\"error\":\"egress_denied\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"rule\":\"no-delete\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"request_id\""), std::string::npos);
  r = curl({api("/admin/users")});
  EXPECT_EQ(r.http_code, 403);
  EXPECT_NE(r.body.find("\"rule\":\"admin\""), std::string::npos);
  EXPECT_TRUE(upstream->heads().empty());
  EXPECT_GE(audit_with_reason("no_destination").size(), 1u);
}

TEST_F(GatewayE2E, ProxyAuthRequired) {
  auto r = curl({api("/echo")}, "");
  EXPECT_EQ(r.http_code, 407);
  r = curl({api("/echo")}, "sb1:wrong");
  EXPECT_EQ(r.http_code, 407);
  EXPECT_NE(r.headers.find("Proxy-Authenticate: Basic"), std::string::npos);
  r = curl({api("/echo")}, "nobody:secret1");
  EXPECT_EQ(r.http_code, 407);
  EXPECT_TRUE(upstream->heads().empty());
}

TEST_F(GatewayE2E, SniMustEqualConnectHostAndBeThere) {
  bool ok = true;
  auto c = tunnel("api.test", "paste.test", &ok);
  EXPECT_FALSE(ok);
  EXPECT_EQ(audit_with_reason("sni_connect_mismatch").size(), 1u);
  auto d = tunnel("api.test", "", &ok);
  EXPECT_FALSE(ok);
  EXPECT_EQ(audit_with_reason("no_sni").size(), 1u);
  EXPECT_TRUE(upstream->heads().empty());
}

TEST_F(GatewayE2E, HostMustMatchSniAndAbsoluteFormTooAndPathsAreChecked) {
  bool ok = false;
  auto c = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  c->send("GET /echo HTTP/1.1\r\nHost: paste.test\r\n\r\n");
  std::string r = c->read_until("\r\n\r\n");
  EXPECT_NE(r.find("HTTP/1.1 421"), std::string::npos) << r;
  auto d = tunnel("api.test", "api.test", &ok);
  d->send("GET https://paste.test/echo HTTP/1.1\r\nHost: api.test\r\n\r\n");
  r = d->read_until("\r\n\r\n");
  EXPECT_NE(r.find("HTTP/1.1 421"), std::string::npos) << r;
  for (const char* path : {"/echo/../admin", "/echo/%2e%2e/admin", "/echo/..%2fadmin"}) {
    auto e = tunnel("api.test", "api.test", &ok);
    e->send(std::string("GET ") + path +
            " HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n");
    r = e->read_until_close();
    EXPECT_NE(r.find("HTTP/1.1 400"), std::string::npos) << path << r;
  }
  auto curl_r = curl({"--path-as-is", api("/echo/../admin")});
  EXPECT_EQ(curl_r.http_code, 400);
  EXPECT_TRUE(upstream->heads().empty());
}

TEST_F(GatewayE2E, SmugglingShapesGet400AndClose) {
  const char* shapes[] = {
      "POST /echo HTTP/1.1\r\nHost: api.test\r\nContent-Length: 4\r\nTransfer-Encoding: "
      "chunked\r\n\r\n0\r\n\r\n",
      "POST /echo HTTP/1.1\r\nHost: api.test\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcd",
      "POST /echo HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: xchunked\r\n\r\n",
      "POST /echo HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
      "GET /echo HTTP/1.1\r\nHost: api.test\r\nX: a\r\n b\r\n\r\n",
      "GET /echo HTTP/1.1\nHost: api.test\n\n",
      "GET /echo HTTP/1.1\r\nHost: api.test\r\nContent-Length: 1x\r\n\r\n",
  };
  for (const char* s : shapes) {
    bool ok = false;
    auto c = tunnel("api.test", "api.test", &ok);
    ASSERT_TRUE(ok);
    c->send(s);
    std::string r = c->read_until_close();
    EXPECT_NE(r.find("HTTP/1.1 400"), std::string::npos) << s << "\n--\n" << r;
    EXPECT_TRUE(c->peer_closed()) << s;
  }
  EXPECT_TRUE(upstream->heads().empty());
}

TEST_F(GatewayE2E, TokenSwapAndTokenMisuse) {
  auto r = curl({api("/echo"), "-H", "Authorization: Bearer " + kGoodToken});
  EXPECT_EQ(r.http_code, 200);
  auto heads = upstream->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find(kSecret), std::string::npos);
  EXPECT_EQ(heads[0].find(kGoodToken), std::string::npos);
  EXPECT_EQ(r.headers.find(kSecret), std::string::npos);
  EXPECT_EQ(last_record().token_id, "tok1");

  r = curl({api("/paste", "paste.test"), "-H", "Authorization: Bearer " + kGoodToken});
  EXPECT_EQ(r.http_code, 403);
  EXPECT_EQ(last_record().reason, "token_misuse");
  r = curl({api("/echo"), "-H", "Authorization: Bearer " + kGoodToken}, "sb2:secret2");
  EXPECT_EQ(r.http_code, 403);  // bound to sb1
  EXPECT_EQ(upstream->heads().size(), 1u);
}

TEST_F(GatewayE2E, RevokedTokenFailsOnOpenKeepAliveConnection) {
  bool ok = false;
  auto c = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  c->send("GET /echo HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + kGoodToken +
          "\r\n\r\n");
  std::string r = c->read_until("body-bytes");
  EXPECT_NE(r.find("HTTP/1.1 200"), std::string::npos) << r;
  creds->revoke(kGoodToken);
  c->send("GET /echo HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + kGoodToken +
          "\r\n\r\n");
  r = c->read_until("}\n");
  EXPECT_NE(r.find("HTTP/1.1 403"), std::string::npos) << r;
  EXPECT_NE(r.find("egress_denied"), std::string::npos);
  EXPECT_EQ(upstream->heads().size(), 1u);
  EXPECT_EQ(last_record().reason, "token_inactive");
}

TEST_F(GatewayE2E, PipelinedRequestsAreEachCheckedAndInjected) {
  bool ok = false;
  auto c = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  c->send(
      "GET /echo?1 HTTP/1.1\r\nHost: api.test\r\n\r\n"
      "DELETE /echo HTTP/1.1\r\nHost: api.test\r\n\r\n"
      "GET /echo?3 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer stolen\r\n\r\n"
      "GET /echo?4 HTTP/1.1\r\nHost: paste.test\r\n\r\n");
  std::string r = c->read_until_close();
  ASSERT_EQ(count_of(r, "HTTP/1.1 "), 4u) << r;
  size_t p1 = r.find("HTTP/1.1 200"), p2 = r.find("HTTP/1.1 403"), p3 = r.find("HTTP/1.1 200", p2),
         p4 = r.find("HTTP/1.1 421");
  EXPECT_LT(p1, p2);
  EXPECT_LT(p2, p3);
  EXPECT_LT(p3, p4);
  EXPECT_NE(p4, std::string::npos);
  auto heads = upstream->heads();
  ASSERT_EQ(heads.size(), 2u);
  for (const auto& h : heads) {
    EXPECT_NE(h.find(kSecret), std::string::npos);
    EXPECT_EQ(h.find("stolen"), std::string::npos);
  }
  EXPECT_EQ(upstream->connections(), 1);  // one upstream connection, reused
}

TEST_F(GatewayE2E, LargeBodiesStreamWithBoundedMemory) {
  const uint64_t kBytes = 256ull << 20;
  long before = e2e::rss_kib();
  auto r = curl({api("/big?n=" + std::to_string(kBytes)), "-o", "/dev/null"});
  // -o given twice: curl uses the last; the body file stays empty.
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.size_download, kBytes);
  auto r2 = curl({api("/bigchunked?n=" + std::to_string(kBytes / 4)), "-o", "/dev/null"});
  EXPECT_EQ(r2.exit_code, 0);
  EXPECT_EQ(r2.size_download, kBytes / 4);
  std::string file = tmp + "/big-upload.bin";
  {
    std::ofstream f(file, std::ios::binary);
    std::string block(1 << 20, 'u');
    for (int i = 0; i < 128; ++i) f.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
  auto r3 = curl({api("/upload"), "--data-binary", "@" + file});
  EXPECT_NE(r3.body.find("bytes=" + std::to_string(128u << 20)), std::string::npos) << r3.body;
  long after = e2e::rss_kib();
  // The gateway and fake upstream are in this process: growth far below the bytes moved.
  EXPECT_LT(after - before, 48 * 1024) << "RSS grew by " << (after - before) << " KiB";
  uint64_t down = 0;
  for (auto& rec : audit->records()) down += rec.bytes_down;
  EXPECT_GE(down, kBytes + kBytes / 4);
}

TEST_F(GatewayE2E, UpstreamResetMidResponseClosesClient) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = curl({api("/reset")});
  EXPECT_NE(r.exit_code, 0);  // transfer closed with outstanding data
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(last_record().reason, "upstream_reset_mid_response");
}

TEST_F(GatewayE2E, AllowedNameResolvingToPrivateAddressIsRefused) {
  auto r = curl({api("/x", "private.test")});
  EXPECT_EQ(r.http_code, 403);
  EXPECT_NE(r.body.find("floors"), std::string::npos) << r.body;
  r = curl({api("/x", "imds.test")});
  EXPECT_EQ(r.http_code, 403);
  // Loopback too, once the floors say so (policy hot-swapped on the running gateway).
  auto strict = std::make_shared<FakePolicy>(*policy);
  strict->denied_prefixes.push_back("127.");
  gateway->set_policy(strict);
  r = curl({api("/echo")});
  EXPECT_EQ(r.http_code, 403);
  EXPECT_EQ(last_record().reason, "address_denied");
  EXPECT_TRUE(upstream->heads().empty());
}

TEST_F(GatewayE2E, UpstreamFailuresGive502) {
  auto r = curl({"https://down.test:" + std::to_string(down_port) + "/x"});
  EXPECT_EQ(r.http_code, 502);
  EXPECT_NE(r.body.find("upstream_unavailable"), std::string::npos) << r.body;
  // An upstream whose certificate is not trusted.
  r = curl({"https://untrusted.test:" + std::to_string(untrusted->port()) + "/x"});
  EXPECT_EQ(r.http_code, 502);
  EXPECT_EQ(last_record().reason, "upstream_tls_failed");
  EXPECT_TRUE(untrusted->heads().empty());
}

TEST_F(GatewayE2E, AbsoluteFormPlainHttpNeverCarriesCredential) {
  std::string base = "http://plain.test:" + std::to_string(plain_upstream->port());
  auto r = curl({base + "/echo"});
  EXPECT_EQ(r.http_code, 200) << r.body;
  ASSERT_EQ(plain_upstream->heads().size(), 1u);
  EXPECT_EQ(plain_upstream->heads()[0].find("Proxy-Authorization"), std::string::npos);
  r = curl({base + "/cred"});
  EXPECT_EQ(r.http_code, 403);
  EXPECT_EQ(last_record().reason, "credential_over_plaintext");
  r = curl({"http://api.test:" + std::to_string(upstream->port()) + "/echo"});
  EXPECT_EQ(r.http_code, 403);  // TLS-only destination (credential route) over plain HTTP
  EXPECT_EQ(plain_upstream->heads().size(), 1u);
}

TEST_F(GatewayE2E, PassthroughViaConnectIsSplicedNotDecrypted) {
  // The client trusts only the upstream's own CA: it works only if the gateway did not
  // terminate TLS.
  auto r =
      curl({"--cacert", upstream_ca, api("/echo", "pt.test"), "-H", "Authorization: Bearer own"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.http_code, 200);
  auto heads = upstream->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find("Bearer own"), std::string::npos);
  EXPECT_EQ(heads[0].find(kSecret), std::string::npos);
  auto rec = last_record();
  EXPECT_EQ(rec.reason, "passthrough");
  // SNI must still equal the CONNECT host.
  bool ok = true;
  RawClient c;
  ASSERT_TRUE(c.connect_tcp(proxy_port));
  c.connect_tunnel("pt.test:" + std::to_string(upstream->port()), "sb1:secret1");
  EXPECT_FALSE(c.start_tls("api.test", upstream_ca));
  (void)ok;
  EXPECT_EQ(last_record().reason, "sni_connect_mismatch");
}

TEST_F(GatewayE2E, SlowlorisHeadIsCutOff) {
  bool ok = false;
  auto c = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  auto t0 = std::chrono::steady_clock::now();
  c->send("GET /echo HTTP/1.1\r\nHost: api.test\r\n");
  for (int i = 0; i < 30 && !c->peer_closed(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!c->send("X-Slow: 1\r\n")) break;
  }
  c->read_until_close();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2500));
  EXPECT_TRUE(upstream->heads().empty());
}

TEST_F(GatewayE2E, AuditFailureDenies) {
  audit->set_failing(true);
  // The request that meets the failing log is itself refused, and never reaches the upstream.
  auto r = curl({api("/echo")});
  EXPECT_EQ(r.http_code, 503);
  EXPECT_NE(r.body.find("audit_unavailable"), std::string::npos) << r.body;
  EXPECT_TRUE(upstream->heads().empty());
  audit->set_failing(false);
  // Its own refusal line was lost too, so the next one is refused (its own line succeeds)...
  auto r2 = curl({api("/echo")});
  EXPECT_EQ(r2.http_code, 503);
  EXPECT_NE(r2.body.find("audit_unavailable"), std::string::npos);
  // ...and then requests flow again.
  auto r3 = curl({api("/echo")});
  EXPECT_EQ(r3.http_code, 200);
  EXPECT_EQ(upstream->heads().size(), 1u);
}

TEST_F(GatewayE2E, AuditFailureDeniesTheRequestOnAnOpenConnection) {
  bool ok = false;
  auto c = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  c->send("GET /echo HTTP/1.1\r\nHost: api.test\r\n\r\n");
  std::string r = c->read_until("body-bytes");
  EXPECT_NE(r.find("HTTP/1.1 200"), std::string::npos) << r;
  // The first request's line is written after its answer: let it land before the log breaks
  // (a line lost there would end this connection instead, tested below).
  EXPECT_EQ(last_record().reason, "allowed");
  audit->set_failing(true);
  c->send("GET /echo HTTP/1.1\r\nHost: api.test\r\n\r\n");
  r = c->read_until_close();
  EXPECT_NE(r.find("HTTP/1.1 503"), std::string::npos) << r;
  EXPECT_NE(r.find("audit_unavailable"), std::string::npos);
  EXPECT_EQ(upstream->heads().size(), 1u);
}

TEST_F(GatewayE2E, AuditFailureAfterTheAnswerClosesTheConnection) {
  bool ok = false;
  auto c = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  // The log breaks after the check that lets the request through: the answer is already on its
  // way, so the client gets it, but the connection then ends instead of carrying more.
  audit->fail_next_appends(1);
  c->send("GET /echo HTTP/1.1\r\nHost: api.test\r\n\r\n");
  std::string r = c->read_until_close();
  EXPECT_NE(r.find("HTTP/1.1 200"), std::string::npos) << r;
  EXPECT_TRUE(c->peer_closed()) << "the gateway kept the connection open (read timed out)";
  EXPECT_EQ(upstream->heads().size(), 1u);
  // The next request, on a new connection, is refused until a line is written again.
  auto r2 = curl({api("/echo")});
  EXPECT_EQ(r2.http_code, 503);
  EXPECT_NE(r2.body.find("audit_unavailable"), std::string::npos) << r2.body;
  auto r3 = curl({api("/echo")});
  EXPECT_EQ(r3.http_code, 200);
  EXPECT_EQ(upstream->heads().size(), 2u);
}

// A client WebSocket frame (RFC 6455 §5.2): FIN, opcode, masked payload.
std::string masked_frame(unsigned opcode, const std::string& payload) {
  std::string f;
  f += static_cast<char>(0x80 | opcode);
  if (payload.size() < 126) {
    f += static_cast<char>(0x80 | payload.size());
  } else if (payload.size() < 65536) {
    f += static_cast<char>(0x80 | 126);
    f += static_cast<char>(payload.size() >> 8);
    f += static_cast<char>(payload.size() & 0xff);
  } else {
    f += static_cast<char>(0x80 | 127);
    for (int i = 7; i >= 0; --i) f += static_cast<char>((payload.size() >> (8 * i)) & 0xff);
  }
  const char mask[4] = {0x12, 0x34, 0x56, 0x78};
  f.append(mask, 4);
  for (size_t i = 0; i < payload.size(); ++i) f += static_cast<char>(payload[i] ^ mask[i % 4]);
  return f;
}

const char* kWebSocketHead =
    "GET /echo/ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    "Authorization: Bearer client-own\r\n\r\n";

// Sends the upgrade request with `message` as a first frame in the same write (bytes behind the
// head must not be lost when the connection turns into a tunnel); returns what was read up to
// the echo of it.
std::string open_websocket(RawClient& c, const std::string& message) {
  c.send(std::string(kWebSocketHead) + masked_frame(0x1, message));
  return c.read_until(message);
}

TEST_F(GatewayE2E, WebSocketIsCheckedInjectedThenTunnelledBothWays) {
  bool ok = false;
  auto c = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  std::string r = open_websocket(*c, "hello websocket");
  ASSERT_NE(r.find("HTTP/1.1 101 Switching Protocols"), std::string::npos) << r;
  EXPECT_NE(r.find("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), std::string::npos) << r;
  EXPECT_NE(r.find("Upgrade: websocket"), std::string::npos);
  EXPECT_EQ(r.find(kSecret), std::string::npos) << r;  // the upstream's echo was scrubbed
  auto heads = upstream->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find(std::string("Authorization: Bearer ") + kSecret), std::string::npos);
  EXPECT_EQ(heads[0].find("client-own"), std::string::npos);
  EXPECT_NE(heads[0].find("Upgrade: websocket"), std::string::npos);

  // A frame larger than the io buffers (64-bit length), both ways.
  std::string big = std::string(70000, 'w') + "END-OF-BIG";
  ASSERT_TRUE(c->send(masked_frame(0x2, big)));
  r = c->read_until("END-OF-BIG");
  EXPECT_NE(r.find("END-OF-BIG"), std::string::npos);
  c->send(masked_frame(0x8, ""));
  c->read_until_close();
  auto recs = audit_with_reason("websocket");
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].decision, AuditDecision::kAllow);
  EXPECT_EQ(recs[0].status, 101);
  EXPECT_EQ(recs[0].route, "echo");
  EXPECT_EQ(recs[0].credential, "github");
  EXPECT_GE(recs[0].bytes_up, big.size() + 15);
  EXPECT_GE(recs[0].bytes_down, big.size() + 15);
}

TEST_F(GatewayE2E, UpgradesOtherThanWebSocketAndUnaskedSwitchesAreRefused) {
  bool ok = false;
  auto c = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  c->send(
      "GET /echo HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade, HTTP2-Settings\r\n"
      "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n");
  std::string r = c->read_until("}\n");
  EXPECT_NE(r.find("HTTP/1.1 403"), std::string::npos) << r;
  EXPECT_EQ(last_record().reason, "upgrade_refused");
  // A websocket upgrade denied by policy is denied like any request.
  auto d = tunnel("api.test", "api.test", &ok);
  std::string denied = kWebSocketHead;
  denied.replace(denied.find("/echo/ws"), 8, "/admin/ws");
  d->send(denied);
  r = d->read_until("}\n");
  EXPECT_NE(r.find("HTTP/1.1 403"), std::string::npos) << r;
  // An upstream that switches protocols unasked: 502, never a tunnel.
  auto e = tunnel("api.test", "api.test", &ok);
  e->send("GET /switch HTTP/1.1\r\nHost: api.test\r\n\r\n");
  r = e->read_until_close();
  EXPECT_NE(r.find("HTTP/1.1 502"), std::string::npos) << r;
  EXPECT_EQ(last_record().reason, "upgrade_not_supported");
  EXPECT_EQ(upstream->heads().size(), 1u);  // only /switch reached the upstream
}

TEST_F(GatewayE2E, NothingFlowsWithoutPolicy) {
  gateway->set_policy(nullptr);
  auto r = curl({api("/echo")});
  EXPECT_EQ(r.http_code, 503);
  EXPECT_NE(admin_get("/healthz").find("503"), std::string::npos);
  EXPECT_TRUE(upstream->heads().empty());
}

TEST_F(GatewayE2E, AdminHealthAndMetrics) {
  curl({api("/echo")});
  curl({api("/admin")});
  std::string h = admin_get("/healthz");
  EXPECT_NE(h.find("200 OK"), std::string::npos);
  std::string m = admin_get("/metrics");
  EXPECT_NE(m.find("cordon_requests_total{decision=\"allow\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("cordon_requests_total{decision=\"deny\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("cordon_cert_mints_total 1"), std::string::npos) << m;
  EXPECT_NE(m.find("cordon_request_duration_seconds_count 2"), std::string::npos) << m;
  EXPECT_EQ(m.find("cordon_audit_disk_bytes"), std::string::npos);  // the sink cannot tell
  audit->set_disk_bytes(123456);
  m = admin_get("/metrics");
  EXPECT_NE(m.find("cordon_audit_disk_bytes 123456"), std::string::npos) << m;
  EXPECT_NE(m.find("cordon_upstream_pool_idle "), std::string::npos) << m;
}

}  // namespace
}  // namespace cordon::gateway

namespace cordon::gateway {
namespace {

class LimitedE2E : public GatewayE2E {
 protected:
  void customize(GatewayOptions& o) override {
    o.limits.max_connections_per_sandbox = 1;
    o.limits.max_mints_per_second = 1;
  }
};

TEST_F(LimitedE2E, ConnectionsPerSandboxAreCapped) {
  bool ok = false;
  auto held = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  auto r = curl({api("/echo")});
  EXPECT_EQ(r.http_code, 503);
  EXPECT_EQ(last_record().reason, "connection_limit");
  r = curl({api("/echo")}, "sb2:secret2");  // another sandbox is not affected
  EXPECT_EQ(r.http_code, 200);
  held.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  r = curl({api("/echo")});
  EXPECT_EQ(r.http_code, 200);
}

// `--dns-server`: names missing from the static map are resolved by querying the configured
// server (here a fake on loopback); the floors apply to its answers as to any other.
class DnsServerE2E : public GatewayE2E {
 protected:
  void customize(GatewayOptions& o) override {
    dns.set("paste.test", {"127.0.0.1"});
    dns.set("private.test", {"10.0.0.1", "169.254.169.254"});
    o.resolve.erase("paste.test");
    o.resolve.erase("private.test");
    o.dns_server = dns.address();
  }
  FakeDns dns;
};

TEST_F(DnsServerE2E, UpstreamNamesResolvedByTheServerAndFloorsStillApply) {
  auto r = curl({api("/x", "paste.test")});
  EXPECT_EQ(r.http_code, 200) << r.body;
  EXPECT_GE(dns.udp_queries(), 1);
  EXPECT_EQ(upstream->heads().size(), 1u);
  r = curl({api("/x", "private.test")});
  EXPECT_EQ(r.http_code, 403);
  EXPECT_NE(r.body.find("floors"), std::string::npos) << r.body;
  EXPECT_EQ(upstream->heads().size(), 1u);
}

class ShortIdleE2E : public GatewayE2E {
 protected:
  void customize(GatewayOptions& o) override { o.limits.idle_timeout_ms = 600; }
};

TEST_F(ShortIdleE2E, SilentWebSocketTunnelIsClosedAtTheIdleTimeout) {
  bool ok = false;
  auto c = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  std::string r = open_websocket(*c, "ping-through");
  ASSERT_NE(r.find("HTTP/1.1 101"), std::string::npos) << r;
  auto t0 = std::chrono::steady_clock::now();
  c->read_until_close();
  EXPECT_TRUE(c->peer_closed());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  auto recs = audit_with_reason("websocket");
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_GE(recs[0].bytes_up, 12u);
}

}  // namespace
}  // namespace cordon::gateway

// ---- the real CA behind the gateway: one leaf cache (renewed before expiry), one mint budget --

namespace cordon::gateway {
namespace {

class RealCaE2E : public GatewayE2E {
 protected:
  void customize_certs(std::shared_ptr<CertProvider>& provider) override {
    auto ca = ca::Authority::create(StateDir{tmp + "/state"}, false);
    ASSERT_TRUE(ca) << ca.error().message;
    authority = *ca;
    std::ofstream(gateway_ca, std::ios::trunc) << authority->root_pem();
    ca::LeafCacheOptions o;
    o.renew_margin = std::chrono::hours(1);
    o.mints_per_second = mints_per_second();
    o.clock = [this] {
      std::lock_guard lk(clock_mu);
      return clock_now;
    };
    cache = std::make_shared<ca::LeafCertCache>(authority, o);
    provider = adapters::make_cert_provider(cache);
  }
  virtual double mints_per_second() const { return 0; }
  void set_clock(SystemTime t) {
    std::lock_guard lk(clock_mu);
    clock_now = t;
  }

  std::shared_ptr<const ca::Authority> authority;
  std::shared_ptr<ca::LeafCertCache> cache;
  std::mutex clock_mu;
  // Starts 30 minutes short of a leaf lifetime (7 days) in the past, so that the first leaf
  // expires 30 minutes from the real now: every leaf stays valid for the (real-time) client.
  SystemTime real_start = std::chrono::system_clock::now();
  SystemTime clock_now = real_start - std::chrono::hours(7 * 24) + std::chrono::minutes(30);
};

TEST_F(RealCaE2E, LeavesAreRenewedBeforeTheyExpireOnALongRunningGateway) {
  bool ok = false;
  auto a = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  std::string first = a->peer_serial(), first_after = a->peer_not_after();
  ASSERT_FALSE(first.empty());
  a.reset();
  auto b = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  EXPECT_EQ(b->peer_serial(), first);  // cached
  b.reset();
  // Almost 7 days later: the cached leaf has 30 minutes left, under the renewal margin.
  set_clock(real_start);
  auto c = tunnel("api.test", "api.test", &ok);
  ASSERT_TRUE(ok);
  EXPECT_NE(c->peer_serial(), first) << "an old leaf was served past its renewal point";
  EXPECT_NE(c->peer_not_after(), first_after);
  auto st = cache->stats();
  EXPECT_EQ(st.mints, 2u);
  EXPECT_EQ(st.renewals, 1u);
  std::string m = admin_get("/metrics");
  EXPECT_NE(m.find("cordon_cert_mints_total 2"), std::string::npos) << m;
}

class MintBudgetE2E : public RealCaE2E {
 protected:
  double mints_per_second() const override { return 1; }
};

TEST_F(MintBudgetE2E, MintRateRefusesHandshakeFloodsAndSaysSo) {
  set_clock(real_start);
  auto r = curl({api("/echo")});
  EXPECT_EQ(r.http_code, 200);  // one mint
  r = curl({api("/x", "paste.test")});
  EXPECT_NE(r.exit_code, 0);  // a second new name within the same second: refused
  auto refused = audit_with_reason("cert_mint_rate_limited");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].sni, "paste.test");
  r = curl({api("/echo")});  // cached leaves are not limited
  EXPECT_EQ(r.http_code, 200);
  std::string m = admin_get("/metrics");
  EXPECT_NE(m.find("cordon_cert_mints_refused_total 1"), std::string::npos) << m;
  EXPECT_EQ(cache->stats().mints, 1u);
}

// ---- audit lines carry no token and no secret, whichever field the sandbox put them in -------

std::string audited_text(const AuditRecord& r) {
  std::string t;
  for (const std::string* f :
       {&r.request_id, &r.sandbox, &r.src, &r.dst, &r.sni, &r.host, &r.method, &r.path,
        &r.destination, &r.route, &r.rule, &r.reason, &r.credential, &r.token_id}) {
    t += *f;
    t += '\n';
  }
  return t;
}

TEST_F(GatewayE2E, NoTokenOrSecretReachesTheAuditLog) {
  const std::string secret_part = kGoodToken.substr(kGoodToken.rfind('_') + 1);
  ASSERT_GE(secret_part.size(), 40u);
  auto r = curl({api("/echo?access_token=" + kGoodToken)});
  EXPECT_EQ(r.http_code, 403);
  r = curl({api("/data/" + kGoodToken)});
  EXPECT_EQ(r.http_code, 403);
  std::string encoded = "%63" + kGoodToken.substr(1);  // "cdn_" with its c percent-encoded
  r = curl({api("/data/x?t=" + encoded)});
  EXPECT_EQ(r.http_code, 403);
  // Absolute-form plain HTTP: the request target is also the audited dst.
  r = curl({"http://plain.test:" + std::to_string(plain_upstream->port()) + "/x?t=" + kGoodToken});
  EXPECT_EQ(r.http_code, 403);
  // A secret value the gateway knows (it injects it for this route) placed in the path.
  r = curl({api(std::string("/echo/") + kSecret)});
  EXPECT_EQ(r.http_code, 200);
  auto misuse = audit_with_reason("token_misuse", 4);
  EXPECT_EQ(misuse.size(), 4u);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto recs = audit->records();
  EXPECT_GE(recs.size(), 5u);
  bool saw_id = false;
  for (const auto& rec : recs) {
    std::string t = audited_text(rec);
    EXPECT_EQ(t.find(secret_part), std::string::npos) << t;
    EXPECT_EQ(t.find(kSecret), std::string::npos) << t;
    saw_id = saw_id || t.find("cdn_tok1_") != std::string::npos || rec.token_id == "tok1";
  }
  EXPECT_TRUE(saw_id) << "the token id (not secret) should stay visible";
}

// ---- a head the proxy listener cannot parse is answered and audited ------------------------

TEST_F(GatewayE2E, UnparsableHeadAtTheProxyListenerIsAnswered400AndAudited) {
  RawClient c;
  ASSERT_TRUE(c.connect_tcp(proxy_port));
  c.send("GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\nBad\x01Header: \"x\"\r\n\r\n");
  std::string r = c.read_until_close();
  EXPECT_NE(r.find("HTTP/1.1 400"), std::string::npos) << r;
  auto recs = audit_with_reason("parse_error");
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, 400);
  EXPECT_EQ(recs[0].decision, AuditDecision::kError);
  // A head over the size limit: refused with its status, audited.
  RawClient d;
  ASSERT_TRUE(d.connect_tcp(proxy_port));
  d.send("GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\nX-Big: " + std::string(40000, 'a') +
         "\r\n\r\n");
  std::string r2 = d.read_until_close();
  EXPECT_NE(r2.find("HTTP/1.1 431"), std::string::npos) << r2.substr(0, 200);
  EXPECT_EQ(audit_with_reason("parse_error", 2).size(), 2u);
  EXPECT_TRUE(upstream->heads().empty());
}

}  // namespace
}  // namespace cordon::gateway
