// End-to-end: HTTP/2 from the sandbox to an HTTP/2 upstream through the gateway (explicit
// proxy, CONNECT, TLS with ALPN h2 both sides). The upstream is an nghttp2 server that speaks
// gRPC and Connect-RPC framing (gateway/h2/testing/fake_h2_upstream.h); the client is
// nghttp2's client library (h2_client.h), and curl --http2 where that is easier. Also an
// HTTP/1.1-only upstream, which the same client connection reaches over HTTP/1.1 (the choice
// cached per upstream). Every packet stays on loopback.
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "gateway/gateway.h"
#include "gateway/h2/testing/fake_h2_upstream.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"
#include "tests/e2e/gateway/e2e_util.h"
#include "tests/e2e/gateway/h2_client.h"

namespace cordon::gateway {
namespace {

using e2e::NgClient;
using h2::testing::FakeH2Upstream;
using h2::testing::grpc_frame;
using h2::testing::grpc_unframe;
using testing::FakeCerts;
using testing::FakeCredentials;
using testing::FakePolicy;
using testing::FakeSandboxes;
using testing::FakeUpstream;
using testing::MemoryAudit;

constexpr const char* kSecret = "ghp_H2UPSTREAM_SECRET_42";
constexpr const char* kApiKey = "key_H2UPSTREAM_APIKEY_77";

class H2UpstreamE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);
    char tmpl[] = "/tmp/cordon-h2up-e2e-XXXXXX";
    tmp = mkdtemp(tmpl);
    h2up = std::make_unique<FakeH2Upstream>(std::vector<std::string>{"grpc.test"});
    h1up = std::make_unique<FakeUpstream>(std::vector<std::string>{"h1.test"});
    h2up->ca().write_pem(tmp + "/h2-ca.pem");
    h1up->ca().write_pem(tmp + "/h1-ca.pem");
    certs = std::make_shared<FakeCerts>();
    gateway_ca = tmp + "/gateway-ca.pem";
    certs->ca().write_pem(gateway_ca);
    CredentialSpec gh{"github", "github-pat", "Authorization", "Bearer {secret}", TokenMode::kOff};
    CredentialSpec key{"apikey", "api-key", "X-Api-Key", "{secret}", TokenMode::kOff};
    policy = std::make_shared<FakePolicy>();
    policy->denied_prefixes = {"10.", "169.254.", "192.168."};
    policy->destinations = {
        {"grpc",
         {"grpc.test"},
         {h2up->port()},
         TlsMode::kIntercept,
         false,
         {{"no-admin", false, {}, "/admin", std::nullopt},
          {"no-delete", false, {"DELETE"}, "", std::nullopt},
          {"echo", true, {"POST"}, "/echo.Echo/", gh},
          {"keyed", true, {"POST", "GET"}, "/keyed/", key},
          {"any", true, {}, "/", std::nullopt}}},
        {"h1",
         {"h1.test"},
         {h1up->port()},
         TlsMode::kIntercept,
         false,
         {{"any", true, {}, "", gh}}},
    };
    policy->profiles["default"] = {"grpc", "h1"};
    sandboxes = std::make_shared<FakeSandboxes>();
    sandboxes->add("sb1", "secret1", "default");
    creds = std::make_shared<FakeCredentials>();
    creds->put_secret("github-pat", kSecret);
    creds->put_secret("api-key", kApiKey);
    audit = std::make_shared<MemoryAudit>();
    GatewayOptions opts;
    opts.threads = 2;
    opts.system_trust_store = false;
    opts.upstream_ca_files = {tmp + "/h2-ca.pem", tmp + "/h1-ca.pem"};
    opts.resolve = {{"grpc.test", "127.0.0.1"}, {"h1.test", "127.0.0.1"}};
    opts.h2.resets = {30, 5};
    customize(opts);
    auto gw = Gateway::create(opts, {certs, sandboxes, creds, audit});
    ASSERT_TRUE(gw) << gw.error().message;
    gateway = std::move(*gw);
    gateway->set_policy(policy);
    auto p = gateway->listen_proxy("127.0.0.1:0");
    ASSERT_TRUE(p) << p.error().message;
    proxy_port = *p;
    gateway->start();
  }
  virtual void customize(GatewayOptions&) {}
  void TearDown() override {
    if (audit) e2e::expect_every_decision_audited(*audit);
    if (gateway) gateway->stop(500);
    gateway.reset();
    if (!tmp.empty()) std::filesystem::remove_all(tmp);
  }
  std::string authority(const std::string& host = "grpc.test") {
    return host + ":" + std::to_string(host == "h1.test" ? h1up->port() : h2up->port());
  }
  std::unique_ptr<NgClient> client(const std::string& host = "grpc.test") {
    auto c = std::make_unique<NgClient>();
    EXPECT_TRUE(c->connect(proxy_port, authority(host), host, gateway_ca, "sb1:secret1"));
    return c;
  }
  int32_t grpc_call(NgClient& c, const std::string& method, bool end = false) {
    return c.start("POST", authority(), method,
                   {{"content-type", "application/grpc"}, {"te", "trailers"}}, end);
  }
  std::vector<AuditRecord> records_with(const std::string& reason, size_t at_least = 1) {
    std::vector<AuditRecord> out;
    for (int i = 0; i < 250; ++i) {
      out.clear();
      for (auto& r : audit->records()) {
        if (r.reason == reason) out.push_back(r);
      }
      if (out.size() >= at_least) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return out;
  }

  std::string tmp, gateway_ca;
  uint16_t proxy_port = 0;
  std::unique_ptr<FakeH2Upstream> h2up;
  std::unique_ptr<FakeUpstream> h1up;
  std::shared_ptr<FakeCerts> certs;
  std::shared_ptr<FakePolicy> policy;
  std::shared_ptr<FakeSandboxes> sandboxes;
  std::shared_ptr<FakeCredentials> creds;
  std::shared_ptr<MemoryAudit> audit;
  std::unique_ptr<Gateway> gateway;
};

TEST_F(H2UpstreamE2E, GrpcBidiStreamingWithTrailersAndTheCredentialNeverEchoed) {
  auto c = client();
  int32_t id = grpc_call(*c, "/echo.Echo/Echo");
  ASSERT_GT(id, 0);
  // Request streaming and response streaming interleaved: each message's echo arrives before
  // the next message is sent.
  std::string got;
  for (int i = 0; i < 5; ++i) {
    std::string msg = "message-" + std::to_string(i);
    c->write(id, grpc_frame(msg), false);
    ASSERT_TRUE(c->run_until([&] {
      std::string b = c->responses[id].body;
      auto frames = grpc_unframe(b);
      return frames.size() == static_cast<size_t>(i + 1);
    })) << i;
  }
  c->write(id, "", true);
  ASSERT_TRUE(c->wait_end(id));
  auto& r = c->responses[id];
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "application/grpc");
  std::string body = r.body;
  auto frames = grpc_unframe(body);
  ASSERT_EQ(frames.size(), 5u);
  EXPECT_EQ(frames[4], "message-4");
  EXPECT_EQ(r.trailer("grpc-status"), "0");
  EXPECT_EQ(r.trailer("x-count"), "5");
  // The upstream reflected the injected credential in a header and a trailer (threat 23).
  EXPECT_EQ(r.header("x-echo-authorization"), "");
  EXPECT_EQ(r.trailer("x-echo-trailer-authorization"), "");
  for (auto& [k, v] : r.headers) EXPECT_EQ(v.find(kSecret), std::string::npos) << k;
  for (auto& [k, v] : r.trailers) EXPECT_EQ(v.find(kSecret), std::string::npos) << k;
  auto seen = h2up->wait_stream("/echo.Echo/Echo", true);
  ASSERT_GT(seen.id, 0);
  EXPECT_EQ(seen.field("authorization"), std::string("Bearer ") + kSecret);
  EXPECT_EQ(seen.field("te"), "trailers");
  for (auto& f : seen.fields) {
    if (f.name == "authorization") {
      EXPECT_TRUE(f.never_indexed);
    }
  }
  auto recs = records_with("allowed");
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].credential, "github");
  EXPECT_EQ(recs[0].status, 200);
}

TEST_F(H2UpstreamE2E, InjectedCustomHeaderIsNeverIndexedUpstream) {
  auto c = client();
  // The sandbox's own value is stripped; the injected one goes out never-indexed (HPACK), so no
  // table entry on the upstream connection holds the secret.
  int32_t a = c->start("GET", authority(), "/keyed/1", {{"x-api-key", "mine"}}, true);
  int32_t b = c->start("GET", authority(), "/keyed/2", {}, true);
  ASSERT_TRUE(c->wait_end(a));
  ASSERT_TRUE(c->wait_end(b));
  EXPECT_EQ(c->responses[a].status, 200);
  EXPECT_EQ(c->responses[a].header("x-echo-api-key"), "");  // scrubbed
  for (const char* p : {"/keyed/1", "/keyed/2"}) {
    auto s = h2up->wait_stream(p, true);
    ASSERT_GT(s.id, 0) << p;
    size_t keys = 0;
    for (auto& f : s.fields) {
      if (f.name != "x-api-key") continue;
      ++keys;
      EXPECT_EQ(f.value, kApiKey);
      EXPECT_TRUE(f.never_indexed) << p;
    }
    EXPECT_EQ(keys, 1u) << p;
  }
}

TEST_F(H2UpstreamE2E, AllowedAndDeniedStreamsOnOneConnectionShareOneUpstreamConnection) {
  auto c = client();
  std::vector<int32_t> ids = {
      grpc_call(*c, "/echo.Echo/Echo", true),
      c->start("GET", authority(), "/admin/users", {}, true),
      c->start("DELETE", authority(), "/things/1", {}, true),
      c->start("GET", authority(), "/plain/1", {}, true),
      c->start("GET", authority(), "/plain/2", {}, true),
  };
  for (auto id : ids) ASSERT_TRUE(c->wait_end(id)) << id;
  EXPECT_EQ(c->responses[ids[0]].trailer("grpc-status"), "0");
  EXPECT_EQ(c->responses[ids[1]].status, 403);
  EXPECT_EQ(c->responses[ids[2]].status, 403);
  EXPECT_EQ(c->responses[ids[3]].body, "ok GET /plain/1");
  EXPECT_EQ(c->responses[ids[4]].body, "ok GET /plain/2");
  // Toward the sandbox too, a cookie the upstream sets stays out of the HPACK tables.
  auto& ni = c->responses[ids[3]].never_indexed;
  EXPECT_NE(std::find(ni.begin(), ni.end(), "set-cookie"), ni.end());
  EXPECT_FALSE(c->goaway);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto seen = h2up->streams();
  EXPECT_EQ(seen.size(), 3u);  // only the allowed ones
  for (auto& s : seen) {
    EXPECT_NE(s.path, "/admin/users");
    EXPECT_EQ(s.connection, 1);
  }
  EXPECT_EQ(h2up->connections(), 1);
  size_t lines = 0;
  for (auto& r : audit->records()) lines += r.kind == AuditKind::kRequest;
  EXPECT_EQ(lines, 5u);
}

TEST_F(H2UpstreamE2E, ServerStreamingAndTrailersOnlyStatus) {
  auto c = client();
  int32_t s = grpc_call(*c, "/echo.Echo/ServerStream");
  c->write(s, grpc_frame("200:4096"), true);
  int32_t f = grpc_call(*c, "/echo.Echo/Fail", true);
  ASSERT_TRUE(c->wait_end(s, 10000));
  ASSERT_TRUE(c->wait_end(f));
  std::string body = c->responses[s].body;
  auto frames = grpc_unframe(body);
  EXPECT_EQ(frames.size(), 200u);
  EXPECT_TRUE(body.empty());
  EXPECT_EQ(c->responses[s].trailer("grpc-status"), "0");
  // Trailers-only: grpc-status comes in the one HEADERS frame, which ends the stream.
  auto& fr = c->responses[f];
  EXPECT_TRUE(fr.ended);
  EXPECT_EQ(fr.header("grpc-status"), "7");
  EXPECT_EQ(fr.header("grpc-message"), "denied");
  EXPECT_TRUE(fr.body.empty());
}

TEST_F(H2UpstreamE2E, ConnectRpcStreamingAndUnary) {
  auto c = client();
  int32_t s = c->start("POST", authority(), "/acme.v1.Chat/ConnectStream",
                       {{"content-type", "application/connect+json"}}, false);
  c->write(s, grpc_frame("{\"text\":\"hi\"}") + grpc_frame("{\"text\":\"again\"}"), true);
  std::string unary = "{\"name\":\"x\"}";
  int32_t u = c->start(
      "POST", authority(), "/connect-unary",
      {{"content-type", "application/json"}, {"content-length", std::to_string(unary.size())}},
      false);
  c->write(u, unary, true);
  ASSERT_TRUE(c->wait_end(s));
  ASSERT_TRUE(c->wait_end(u));
  std::string body = c->responses[s].body;
  auto frames = grpc_unframe(body);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[1], "{\"text\":\"again\"}");
  EXPECT_EQ(static_cast<uint8_t>(
                c->responses[s].body[c->responses[s].body.size() - frames[2].size() - 5]),
            0x02);  // end-of-stream envelope
  EXPECT_EQ(c->responses[u].status, 200);
  EXPECT_EQ(c->responses[u].body, unary);
}

TEST_F(H2UpstreamE2E, ClientResetCancelsTheUpstreamStream) {
  auto c = client();
  int32_t id = c->start("GET", authority(), "/hang", {}, true);
  ASSERT_TRUE(c->run_until([&] { return c->responses[id].status == 200; }));
  c->reset(id, NGHTTP2_CANCEL);
  auto seen = h2up->wait_stream("/hang", true);
  ASSERT_GT(seen.id, 0);
  EXPECT_TRUE(seen.reset_by_client);
  EXPECT_EQ(seen.close_error, static_cast<uint32_t>(NGHTTP2_CANCEL));
  EXPECT_EQ(records_with("client_reset").size(), 1u);
  // The connection (and the upstream connection) go on.
  int32_t next = c->start("GET", authority(), "/plain/after", {}, true);
  ASSERT_TRUE(c->wait_end(next));
  EXPECT_EQ(c->responses[next].body, "ok GET /plain/after");
  EXPECT_EQ(h2up->connections(), 1);
}

TEST_F(H2UpstreamE2E, UpstreamResetsAreRelayedAndCountedAgainstTheClient) {
  auto c = client();
  int32_t id = c->start("GET", authority(), "/rst?code=7", {}, true);
  ASSERT_TRUE(c->wait_end(id));
  EXPECT_EQ(c->responses[id].rst, static_cast<uint32_t>(NGHTTP2_REFUSED_STREAM));
  EXPECT_EQ(records_with("upstream_reset").size(), 1u);
  // A client that makes the upstream reset stream after stream (CVE-2025-8671's shape through
  // a proxy) spends its reset budget (30 here): the connection ends with ENHANCE_YOUR_CALM.
  for (int i = 0; i < 60 && !c->goaway; ++i) {
    c->start("GET", authority(), "/rst?code=2", {}, true);
    c->run_until([&] { return c->goaway; }, 50);
  }
  c->run_until([&] { return c->goaway; }, 3000);
  EXPECT_TRUE(c->goaway);
  EXPECT_EQ(c->goaway_code, static_cast<uint32_t>(NGHTTP2_ENHANCE_YOUR_CALM));
  EXPECT_EQ(records_with("reset_flood").size(), 1u);
}

TEST_F(H2UpstreamE2E, LongLivedStreamStaysOpen) {
  auto c = client();
  int32_t id = grpc_call(*c, "/echo.Echo/Echo");
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 25; ++i) {
    c->write(id, grpc_frame("tick"), false);
    ASSERT_TRUE(c->run_until([&] {
      std::string b = c->responses[id].body;
      return grpc_unframe(b).size() == static_cast<size_t>(i + 1);
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2500));
  EXPECT_FALSE(c->responses[id].closed);
  c->write(id, "", true);
  ASSERT_TRUE(c->wait_end(id));
  EXPECT_EQ(c->responses[id].trailer("grpc-status"), "0");
  EXPECT_EQ(c->responses[id].trailer("x-count"), "25");
}

TEST_F(H2UpstreamE2E, LargeResponseFlowsWithBoundedWindows) {
  auto c = client();
  const size_t kBytes = 32u << 20;
  int32_t id = c->start("GET", authority(), "/big?n=" + std::to_string(kBytes), {}, true);
  long rss0 = e2e::rss_kib(), peak = rss0;
  size_t total = 0;
  ASSERT_TRUE(c->run_until(
      [&] {
        peak = std::max(peak, e2e::rss_kib());
        auto& r = c->responses[id];
        if (r.body.size() > (1 << 20)) {
          total += r.body.size();
          r.body.clear();
        }
        return r.closed;
      },
      60000));
  total += c->responses[id].body.size();
  EXPECT_EQ(total, kBytes);
  EXPECT_TRUE(c->responses[id].ended);
  EXPECT_LT(peak - rss0, 32 * 1024) << "KiB";
}

// One io thread: the idle HTTP/1.1 pool is per thread, and the test follows one connection.
class H2UpstreamE2EOneThread : public H2UpstreamE2E {
  void customize(GatewayOptions& o) override { o.threads = 1; }
};

TEST_F(H2UpstreamE2EOneThread, Http1OnlyUpstreamIsReachedOverHttp1AndTheChoiceIsCached) {
  std::vector<std::unique_ptr<NgClient>> clients;
  for (int round = 0; round < 2; ++round) {
    clients.push_back(client("h1.test"));
    NgClient* c = clients.back().get();
    int32_t a = c->start("GET", authority("h1.test"), "/echo?r=" + std::to_string(round), {}, true);
    ASSERT_TRUE(c->wait_end(a)) << round;
    EXPECT_EQ(c->responses[a].status, 200);
    EXPECT_NE(c->responses[a].body.find("GET /echo?r=" + std::to_string(round) + " HTTP/1.1"),
              std::string::npos);
    EXPECT_EQ(c->responses[a].header("x-echo-authorization"), "");
  }
  auto heads = h1up->heads();
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_NE(heads[1].find(std::string("Authorization: Bearer ") + kSecret), std::string::npos);
  // The probe's HTTP/1.1 connection served the first round and was pooled; the second round
  // knew the upstream speaks HTTP/1.1 and took it from the pool.
  EXPECT_EQ(h1up->connections(), 1);
}

// What /reflect sent for the stream the upstream saw (once), the secret blanked as the
// scrubber blanks it.
std::string reflected(const h2::testing::SeenStream& seen, const std::string& secret) {
  std::string once = seen.method + " " + seen.path + "\n";
  for (const auto& f : seen.fields) once += f.name + ": " + f.value + "\n";
  for (size_t at = once.find(secret); at != std::string::npos; at = once.find(secret, at))
    once.replace(at, secret.size(), std::string(secret.size(), '*'));
  return once;
}

std::string repeated(const std::string& once, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += once;
  return out;
}

TEST_F(H2UpstreamE2E, InjectedCredentialEchoedInTheBodyIsScrubbed) {
  auto c = client();
  // Larger than the upstream's and the client's windows: the secret lands across DATA frame
  // boundaries, and the hold-back must not stall the window accounting.
  const int kRepeat = 4000;
  const std::string path = "/keyed/reflect?repeat=" + std::to_string(kRepeat) + "&trailer=1";
  int32_t id = c->start("GET", authority(), path, {}, true);
  ASSERT_TRUE(c->wait_end(id, 20000));
  auto& r = c->responses[id];
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.ended);
  auto seen = h2up->wait_stream(path, true);
  ASSERT_GT(seen.id, 0);
  EXPECT_EQ(seen.field("x-api-key"), kApiKey);
  // The gateway asked for a body it can scan.
  EXPECT_EQ(seen.field("accept-encoding"), "identity");
  std::string want = repeated(reflected(seen, kApiKey), kRepeat);
  EXPECT_EQ(r.body.find(kApiKey), std::string::npos);
  EXPECT_EQ(r.body.size(), want.size());
  EXPECT_TRUE(r.body == want) << r.body.substr(0, 400);
  // Identity keeps its length: the content-length stays true.
  EXPECT_EQ(r.header("content-length"), std::to_string(want.size()));
  // Trailers: the one reflecting the secret is dropped, the other passes.
  EXPECT_EQ(r.trailer("x-status"), "done");
  EXPECT_EQ(r.trailer("x-echo-trailer-api-key"), "");
  for (auto& [k, v] : r.trailers) EXPECT_EQ(v.find(kApiKey), std::string::npos) << k;
  auto recs = records_with("allowed");
  ASSERT_EQ(recs.size(), 1u);
  bool counted = false;
  for (auto& [k, n] : recs[0].counts)
    counted = counted || (k == "body_secrets_scrubbed" && n == kRepeat);
  EXPECT_TRUE(counted);
}

TEST_F(H2UpstreamE2E, CompressedBodiesAreDecodedAndScrubbedOtherCodingsRefused) {
  auto c = client();
  // Compresses to a few KiB and decodes to several MiB: decoded in bounded steps while the
  // client takes it.
  const int kRepeat = 30000;
  for (std::string enc : {"gzip", "deflate"}) {
    const std::string path = "/keyed/reflect?repeat=" + std::to_string(kRepeat) + "&enc=" + enc;
    int32_t id = c->start("GET", authority(), path, {}, true);
    long rss0 = e2e::rss_kib(), peak = rss0;
    ASSERT_TRUE(c->run_until(
        [&] {
          peak = std::max(peak, e2e::rss_kib());
          return c->responses[id].closed;
        },
        30000))
        << enc;
    auto& r = c->responses[id];
    ASSERT_EQ(r.status, 200) << enc;
    EXPECT_TRUE(r.ended) << enc;
    EXPECT_EQ(r.header("content-encoding"), "") << enc;  // sent decoded
    auto seen = h2up->wait_stream(path, true);
    ASSERT_GT(seen.id, 0) << enc;
    std::string want = repeated(reflected(seen, kApiKey), kRepeat);
    EXPECT_EQ(r.body.find(kApiKey), std::string::npos) << enc;
    EXPECT_EQ(r.body.size(), want.size()) << enc;
    EXPECT_TRUE(r.body == want) << enc;
    // The client holds the decoded body; the gateway only its bounded buffers.
    EXPECT_LT(peak - rss0, static_cast<long>(2 * want.size() / 1024) + 32 * 1024) << enc;
  }
  const std::string path = "/keyed/reflect?enc=br";
  int32_t id = c->start("GET", authority(), path, {}, true);
  ASSERT_TRUE(c->wait_end(id));
  EXPECT_EQ(c->responses[id].status, 502);
  EXPECT_EQ(c->responses[id].body.find(kApiKey), std::string::npos);
  EXPECT_EQ(records_with("unscannable_content_encoding").size(), 1u);
}

TEST_F(H2UpstreamE2E, CurlAndNghttpThroughTheGateway) {
  if (std::system("curl --version 2>/dev/null | grep -q HTTP2") != 0) GTEST_SKIP() << "no h2 curl";
  std::vector<std::string> args = {"--proxy",      "http://127.0.0.1:" + std::to_string(proxy_port),
                                   "--proxy-user", "sb1:secret1",
                                   "--cacert",     gateway_ca,
                                   "--http2",      "https://" + authority() + "/plain/curl"};
  auto r = e2e::run_curl(args, tmp);
  ASSERT_EQ(r.exit_code, 0) << r.body;
  EXPECT_NE(r.headers.find("HTTP/2 200"), std::string::npos) << r.headers;
  EXPECT_EQ(r.body, "ok GET /plain/curl");
  auto s = h2up->wait_stream("/plain/curl", true);
  EXPECT_GT(s.id, 0);
}

}  // namespace
}  // namespace cordon::gateway
