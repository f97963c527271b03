// End-to-end: HTTP/2 from the sandbox through the explicit proxy (CONNECT, then TLS with ALPN
// h2), each stream checked like an HTTP/1.1 request and forwarded to an HTTP/1.1 fake upstream
// (own CA). Clients: curl --http2, and a frame-level client for what curl will not send
// (fronting via :authority, smuggling shapes, floods). Every packet stays on loopback.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "common/encoding.h"
#include "gateway/gateway.h"
#include "gateway/h2/server_session.h"
#include "gateway/h2/testing/frames.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"
#include "tests/e2e/gateway/e2e_util.h"

namespace cordon::gateway {
namespace {

namespace f = h2::testing;
using testing::FakeCerts;
using testing::FakeCredentials;
using testing::FakePolicy;
using testing::FakeSandboxes;
using testing::FakeUpstream;
using testing::MemoryAudit;

constexpr const char* kSecret = "ghp_H2SECRET_0123456789";
const std::string kToken = FakeCredentials::make_token("tok1");

// A blocking HTTP/2 client over the proxy: CONNECT, TLS offering h2 only, raw frames.
class H2Client {
 public:
  ~H2Client() {
    if (ssl_) SSL_free(ssl_);
    if (ctx_) SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  bool connect(uint16_t proxy_port, const std::string& authority, const std::string& sni,
               const std::string& ca_file) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(proxy_port);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string req = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority +
                      "\r\nProxy-Authorization: Basic " + base64_encode("sb1:secret1") + "\r\n\r\n";
    if (::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
      return false;
    std::string head;
    char ch;
    while (head.find("\r\n\r\n") == std::string::npos && ::recv(fd_, &ch, 1, 0) == 1) head += ch;
    if (head.find(" 200 ") == std::string::npos) return false;
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(ctx_, ca_file.c_str(), nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    static const unsigned char kAlpn[] = {2, 'h', '2'};
    SSL_CTX_set_alpn_protos(ctx_, kAlpn, sizeof kAlpn);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    SSL_set_tlsext_host_name(ssl_, sni.c_str());
    SSL_set1_host(ssl_, sni.c_str());
    if (SSL_connect(ssl_) != 1) return false;
    const unsigned char* p = nullptr;
    unsigned len = 0;
    SSL_get0_alpn_selected(ssl_, &p, &len);
    if (len != 2 || std::memcmp(p, "h2", 2) != 0) return false;
    return send(f::preface() + f::settings_ack());
  }
  bool send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      int n = SSL_write(ssl_, bytes.data() + off, static_cast<int>(bytes.size() - off));
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads frames until `done` says so, the peer closes, or `timeout_ms` passes. Acks SETTINGS
  // and opens the windows for every DATA frame (a well-behaved client).
  bool read_until(const std::function<bool(const f::Frame&)>& done, int timeout_ms = 5000) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < until) {
      bool hit = false;
      for (auto& fr : f::read_frames(pending_)) {
        frames.push_back(fr);
        if (fr.type == f::kData && !fr.payload.empty() && auto_window) {
          auto n = static_cast<uint32_t>(fr.payload.size());
          send(f::window_update(0, n) + f::window_update(fr.stream, n));
        }
        if (fr.type == f::kGoaway) goaway = true;
        hit = hit || done(frames.back());
      }
      if (hit) return true;
      pollfd p{fd_, POLLIN, 0};
      if (SSL_pending(ssl_) == 0 && ::poll(&p, 1, 100) <= 0) continue;
      char buf[16384];
      int n = SSL_read(ssl_, buf, sizeof buf);
      if (n <= 0) {
        closed = true;
        return false;
      }
      pending_.append(buf, static_cast<size_t>(n));
    }
    return false;
  }
  struct Response {
    int status = 0;
    f::Fields headers, trailers;
    std::string body;
    uint32_t rst = 0xffffffff;
    bool ended = false;
  };
  // Waits for stream `id` to end (END_STREAM or RST_STREAM).
  Response response(int32_t id, int timeout_ms = 5000) {
    Response r;
    size_t seen = 0;
    auto take = [&] {
      for (; seen < frames.size(); ++seen) {
        const f::Frame& fr = frames[seen];
        if (fr.type == f::kHeaders) {
          // Every block once, in order: the HPACK state must follow the wire.
          while (decoded_.size() <= seen) {
            const f::Frame& next = frames[decoded_.size()];
            decoded_.push_back(next.type == f::kHeaders ? dec.decode(next) : f::Fields{});
          }
          const f::Fields& fields = decoded_[seen];
          if (fr.stream != id) continue;
          if (r.status == 0) {
            for (auto& [k, v] : fields) {
              if (k == ":status") r.status = std::stoi(v);
            }
            r.headers = fields;
          } else {
            r.trailers = fields;
          }
        }
        if (fr.stream != id) continue;
        if (fr.type == f::kData) r.body += fr.payload;
        if (fr.type == f::kRstStream) {
          r.rst = f::rst_code(fr);
          r.ended = true;
        }
        if ((fr.type == f::kData || fr.type == f::kHeaders) && (fr.flags & f::kEndStream))
          r.ended = true;
      }
      return r.ended;
    };
    if (!take()) read_until([&](const f::Frame&) { return take(); }, timeout_ms);
    return r;
  }
  std::vector<f::Frame> frames;
  f::Encoder enc;
  f::Decoder dec;
  bool goaway = false, closed = false;
  bool auto_window = true;  // false: never reopen the gateway's window (a stalled reader)

 private:
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string pending_;
  std::vector<f::Fields> decoded_;  // by index in `frames`
};

std::string header(const f::Fields& fields, const std::string& name) {
  for (auto& [k, v] : fields) {
    if (k == name) return v;
  }
  return {};
}

class H2E2E : public ::testing::Test {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);
    char tmpl[] = "/tmp/cordon-h2-e2e-XXXXXX";
    tmp = mkdtemp(tmpl);
    upstream = std::make_unique<FakeUpstream>(std::vector<std::string>{"api.test", "paste.test"});
    upstream_ca = tmp + "/upstream-ca.pem";
    upstream->ca().write_pem(upstream_ca);
    certs = std::make_shared<FakeCerts>();
    gateway_ca = tmp + "/gateway-ca.pem";
    certs->ca().write_pem(gateway_ca);
    uint16_t up = upstream->port();
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
    };
    policy->profiles["default"] = {"api", "paste"};
    sandboxes = std::make_shared<FakeSandboxes>();
    sandboxes->add("sb1", "secret1", "default");
    creds = std::make_shared<FakeCredentials>();
    creds->put_secret("github-pat", kSecret);
    creds->put_token(kToken, "tok1", "sb1", "github");
    audit = std::make_shared<MemoryAudit>();
    GatewayOptions opts;
    opts.threads = 2;
    opts.system_trust_store = false;
    opts.upstream_ca_files = {upstream_ca};
    opts.resolve = {{"api.test", "127.0.0.1"}, {"paste.test", "127.0.0.1"}};
    opts.limits.header_read_timeout_ms = 800;
    opts.h2.resets = {50, 10};
    opts.h2.max_continuation_frames = 8;
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
  std::string authority(const std::string& host = "api.test") {
    return host + ":" + std::to_string(upstream->port());
  }
  std::unique_ptr<H2Client> client(const std::string& host = "api.test") {
    auto c = std::make_unique<H2Client>();
    EXPECT_TRUE(c->connect(proxy_port, authority(host), host, gateway_ca));
    return c;
  }
  e2e::CurlResult curl(std::vector<std::string> args) {
    std::vector<std::string> base = {
        "--proxy",      "http://127.0.0.1:" + std::to_string(proxy_port),
        "--proxy-user", "sb1:secret1",
        "--cacert",     gateway_ca,
        "--http2"};
    base.insert(base.end(), args.begin(), args.end());
    return e2e::run_curl(base, tmp);
  }
  std::vector<AuditRecord> records_with(const std::string& field_value, size_t at_least = 1) {
    std::vector<AuditRecord> out;
    for (int i = 0; i < 250; ++i) {
      out.clear();
      for (auto& r : audit->records()) {
        if (r.reason == field_value) out.push_back(r);
      }
      if (out.size() >= at_least) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return out;
  }
  f::Fields req(const std::string& method, const std::string& path,
                const std::string& host = "api.test") {
    return f::request(method, authority(host), path);
  }

  std::string tmp, upstream_ca, gateway_ca;
  uint16_t proxy_port = 0;
  std::unique_ptr<FakeUpstream> upstream;
  std::shared_ptr<FakeCerts> certs;
  std::shared_ptr<FakePolicy> policy;
  std::shared_ptr<FakeSandboxes> sandboxes;
  std::shared_ptr<FakeCredentials> creds;
  std::shared_ptr<MemoryAudit> audit;
  std::unique_ptr<Gateway> gateway;
};

TEST_F(H2E2E, CurlHttp2GetInjectsTheCredentialAndNeverReturnsIt) {
  if (std::system("curl --version 2>/dev/null | grep -q HTTP2") != 0) GTEST_SKIP() << "no h2 curl";
  auto r = curl({"https://" + authority() + "/echo?q=1", "-H", "Authorization: Bearer mine"});
  ASSERT_EQ(r.exit_code, 0) << r.body;
  EXPECT_EQ(r.http_code, 200);
  EXPECT_NE(r.headers.find("HTTP/2 200"), std::string::npos) << r.headers;
  EXPECT_NE(r.body.find("GET /echo?q=1 HTTP/1.1"), std::string::npos) << r.body;
  auto heads = upstream->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find(std::string("Authorization: Bearer ") + kSecret), std::string::npos);
  EXPECT_EQ(heads[0].find("mine"), std::string::npos);
  // The upstream echoed the credential in X-Echo-Authorization (threat 23): scrubbed.
  EXPECT_EQ(r.headers.find(kSecret), std::string::npos) << r.headers;
  auto recs = records_with("allowed");
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].credential, "github");
  EXPECT_EQ(recs[0].path, "/echo?q=1");
}

TEST_F(H2E2E, AllowedAndDeniedStreamsOnOneConnection) {
  auto c = client();
  std::string b = c->enc.headers(1, req("GET", "/echo"), true);
  b += c->enc.headers(3, req("GET", "/admin/x"), true);
  b += c->enc.headers(5, req("DELETE", "/data"), true);
  b += c->enc.headers(7, req("GET", "/data/1"), true);
  ASSERT_TRUE(c->send(b));
  auto r1 = c->response(1);
  auto r3 = c->response(3);
  auto r5 = c->response(5);
  auto r7 = c->response(7);
  EXPECT_EQ(r1.status, 200);
  EXPECT_EQ(r3.status, 403);
  EXPECT_NE(r3.body.find("egress_denied"), std::string::npos) << r3.body;
  EXPECT_EQ(r5.status, 403);
  EXPECT_EQ(r7.status, 200);
  EXPECT_EQ(header(r1.headers, "x-echo-authorization"), "");
  EXPECT_EQ(upstream->heads().size(), 2u);  // only the allowed ones
  EXPECT_FALSE(c->goaway);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  size_t lines = 0;
  for (auto& r : audit->records()) lines += r.kind == AuditKind::kRequest;
  EXPECT_EQ(lines, 4u);  // one per stream
}

TEST_F(H2E2E, AuthorityOfAnotherHostIs421AndHostMustEqualAuthority) {
  auto c = client();
  // Fronting through :authority on a connection whose SNI is api.test (threat 1).
  std::string b = c->enc.headers(1, req("GET", "/echo", "paste.test"), true);
  auto host_mismatch = req("GET", "/echo");
  host_mismatch.push_back({"host", "paste.test"});
  b += c->enc.headers(3, host_mismatch, true);
  ASSERT_TRUE(c->send(b));
  EXPECT_EQ(c->response(1).status, 421);
  EXPECT_EQ(c->response(3).status, 400);
  EXPECT_TRUE(upstream->heads().empty());
  EXPECT_EQ(records_with("host_sni_mismatch").size(), 1u);
  EXPECT_EQ(records_with("host_authority_mismatch").size(), 1u);
}

TEST_F(H2E2E, SmugglingShapesNeverReachTheUpstream) {
  auto c = client();
  auto te = req("POST", "/data");
  te.push_back({"transfer-encoding", "chunked"});
  std::string b = c->enc.headers(1, te, false);
  auto crlf = req("GET", "/data");
  crlf.push_back({"x-a", "1\r\nTransfer-Encoding: chunked"});
  b += c->enc.headers(3, crlf, true);
  auto space = req("GET", "/data HTTP/1.1\r\nHost: paste.test\r\n\r\nGET /x");
  b += c->enc.headers(5, space, true);
  auto cl = req("POST", "/upload");
  cl.push_back({"content-length", "3"});
  b += c->enc.headers(7, cl, false);
  b += f::data(7, "abcdefGET / HTTP/1.1\r\nHost: paste.test\r\n\r\n", true);
  ASSERT_TRUE(c->send(b));
  for (int32_t id : {1, 3, 5, 7}) EXPECT_EQ(c->response(id).rst, h2::kProtocolError) << id;
  // A well-formed stream on the same connection still works.
  ASSERT_TRUE(c->send(c->enc.headers(9, req("GET", "/data/ok"), true)));
  EXPECT_EQ(c->response(9).status, 200);
  auto heads = upstream->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_NE(heads[0].find("GET /data/ok HTTP/1.1"), std::string::npos);
}

TEST_F(H2E2E, TokenSentToAnotherDestinationIsRefusedAndNeverForwarded) {
  auto c = client("paste.test");
  auto r = req("POST", "/hook", "paste.test");
  r.push_back({"authorization", "Bearer " + kToken});
  ASSERT_TRUE(c->send(c->enc.headers(1, r, true)));
  auto resp = c->response(1);
  EXPECT_EQ(resp.status, 403);
  EXPECT_TRUE(upstream->heads().empty());
  EXPECT_EQ(records_with("token_misuse").size(), 1u);
}

TEST_F(H2E2E, StreamingUploadAndChunkedDownloadWithTrailers) {
  auto c = client();
  auto up = req("POST", "/upload");
  up.push_back({"content-type", "application/grpc"});
  up.push_back({"te", "trailers"});
  ASSERT_TRUE(c->send(c->enc.headers(1, up, false)));
  // 1 MiB in 16 KiB DATA frames, more than the stream window: it flows only as the gateway
  // forwards (and reopens the window).
  std::string piece(16384, 'z');
  size_t sent = 0;
  uint64_t sum = 0;
  for (int i = 0; i < 64; ++i) {
    // Wait for window updates now and then rather than overrunning the window.
    if (i % 8 == 7)
      c->read_until([](const f::Frame& fr) { return fr.type == f::kWindowUpdate; }, 2000);
    ASSERT_TRUE(c->send(f::data(1, piece, i == 63)));
    sent += piece.size();
    sum += 'z' * piece.size();
  }
  auto r = c->response(1, 10000);
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("bytes=" + std::to_string(sent)), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("sum=" + std::to_string(static_cast<uint32_t>(sum))), std::string::npos);
  // The upstream answered chunked with a trailer: it arrives as h2 trailers.
  ASSERT_TRUE(c->send(c->enc.headers(3, req("GET", "/bigchunked?n=300000"), true)));
  auto d = c->response(3, 10000);
  EXPECT_EQ(d.status, 200);
  EXPECT_EQ(d.body.size(), 300000u);
  EXPECT_EQ(header(d.trailers, "x-trailer"), "done");
}

TEST_F(H2E2E, WebSocketOverH2AndConnectAreRefusedWithAReason) {
  auto c = client();
  f::Fields ws = {{":method", "CONNECT"},
                  {":protocol", "websocket"},
                  {":scheme", "https"},
                  {":authority", authority()},
                  {":path", "/chat"}};
  std::string b = c->enc.headers(1, ws, false);
  f::Fields connect = {{":method", "CONNECT"}, {":authority", "evil.test:443"}};
  b += c->enc.headers(3, connect, false);
  ASSERT_TRUE(c->send(b));
  EXPECT_EQ(c->response(1).rst, h2::kProtocolError);
  EXPECT_EQ(c->response(3).status, 400);
  EXPECT_EQ(records_with("extended_connect_not_enabled").size(), 1u);
  EXPECT_EQ(records_with("nested_connect").size(), 1u);
  EXPECT_TRUE(upstream->heads().empty());
}

TEST_F(H2E2E, PriorKnowledgeH2cAtTheProxyIsRefused) {
  e2e::RawClient raw;
  ASSERT_TRUE(raw.connect_tcp(proxy_port));
  raw.send(f::preface());
  std::string answer = raw.read_until_close();
  EXPECT_EQ(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
  EXPECT_TRUE(upstream->heads().empty());
}

TEST_F(H2E2E, RapidResetEndsTheConnectionAndCancelsUpstreamWork) {
  auto c = client();
  std::string b;
  for (int32_t id = 1; id < 2 * 200; id += 2) {
    b += c->enc.headers(id, req("GET", "/big?n=10000000"), true);
    b += f::rst_stream(id, h2::kCancel);
  }
  c->send(b);
  c->read_until([](const f::Frame& fr) { return fr.type == f::kGoaway; });
  ASSERT_TRUE(c->goaway);
  uint32_t code = 0;
  for (auto& fr : c->frames) {
    if (fr.type == f::kGoaway) code = f::goaway_code(fr);
  }
  EXPECT_EQ(code, h2::kEnhanceYourCalm);
  EXPECT_EQ(records_with("reset_flood").size(), 1u);
  // Reset streams were cancelled before they reached the upstream (or while they did).
  EXPECT_LT(upstream->heads().size(), 20u);
  // Another connection is served.
  auto c2 = client();
  ASSERT_TRUE(c2->send(c2->enc.headers(1, req("GET", "/data/after"), true)));
  EXPECT_EQ(c2->response(1).status, 200);
}

TEST_F(H2E2E, ContinuationFloodAndHeaderTimeout) {
  auto c = client();
  std::string block = c->enc.block(req("GET", "/data"));
  std::string b = f::frame(f::kHeaders, f::kEndStream, 1, block.substr(0, 3));
  for (int i = 0; i < 20; ++i) b += f::frame(f::kContinuation, 0, 1, "x");
  c->send(b);
  c->read_until([](const f::Frame& fr) { return fr.type == f::kGoaway; });
  EXPECT_TRUE(c->goaway);
  EXPECT_EQ(records_with("continuation_flood").size(), 1u);
  // A header block that never ends: the connection closes after the header timeout.
  auto slow = client();
  slow->send(f::frame(f::kHeaders, f::kEndStream, 1, block.substr(0, 3)));
  auto t0 = std::chrono::steady_clock::now();
  slow->read_until([](const f::Frame&) { return false; }, 4000);
  EXPECT_TRUE(slow->closed);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(3000));
}

TEST_F(H2E2E, PingFloodEndsOnlyThatConnection) {
  auto other = client();
  auto c = client();
  std::string b;
  for (int i = 0; i < 500; ++i) b += f::ping();
  c->send(b);
  c->read_until([](const f::Frame& fr) { return fr.type == f::kGoaway; });
  EXPECT_TRUE(c->goaway);
  ASSERT_TRUE(other->send(other->enc.headers(1, req("GET", "/data/x"), true)));
  EXPECT_EQ(other->response(1).status, 200);
}

TEST_F(H2E2E, ManyConcurrentStreamsWithBoundedWindows) {
  auto c = client();
  constexpr int kStreams = 40;
  constexpr size_t kBytes = 300000;
  std::string b;
  for (int i = 0; i < kStreams; ++i) {
    b += c->enc.headers(1 + 2 * i, req("GET", "/big?n=" + std::to_string(kBytes)), true);
  }
  ASSERT_TRUE(c->send(b));
  for (int i = 0; i < kStreams; ++i) {
    auto r = c->response(1 + 2 * i, 20000);
    EXPECT_EQ(r.status, 200) << i;
    EXPECT_EQ(r.body.size(), kBytes) << i << " rst " << r.rst;
  }
  EXPECT_FALSE(c->goaway);
  EXPECT_EQ(records_with("allowed", kStreams).size(), static_cast<size_t>(kStreams));
  for (auto& r : audit->records()) {
    if (r.reason != "allowed") ADD_FAILURE() << r.reason << " " << r.status << " " << r.bytes_down;
  }
}

TEST_F(H2E2E, LargeDownloadStreamsWithBoundedRss) {
  auto c = client();
  const uint64_t kBytes = 256ull << 20;
  ASSERT_TRUE(c->send(c->enc.headers(1, req("GET", "/big?n=" + std::to_string(kBytes)), true)));
  long rss0 = e2e::rss_kib(), peak = rss0;
  uint64_t got = 0;
  bool ended = false;
  auto t0 = std::chrono::steady_clock::now();
  c->read_until(
      [&](const f::Frame& fr) {
        if (fr.type == f::kData && fr.stream == 1) got += fr.payload.size();
        ended = ended || (fr.stream == 1 && (fr.flags & f::kEndStream) && fr.type == f::kData);
        if (got % (8 << 20) < fr.payload.size()) peak = std::max(peak, e2e::rss_kib());
        c->frames.clear();  // nothing kept: the test's own memory stays flat
        return ended;
      },
      120000);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(ended);
  EXPECT_EQ(got, kBytes);
  std::printf("h2 download: %llu bytes in %.1f s (%.0f MB/s), RSS growth %ld KiB\n",
              static_cast<unsigned long long>(got), secs, got / secs / 1e6, peak - rss0);
  EXPECT_LT(peak - rss0, 32 * 1024) << "KiB";
}

class H2E2EShortTimeouts : public H2E2E {
  void customize(GatewayOptions& o) override {
    o.limits.idle_timeout_ms = 1000;
    o.limits.upstream_read_timeout_ms = 1000;
  }
};

TEST_F(H2E2EShortTimeouts, StalledWindowCannotPinMemory) {
  auto c = client();
  c->auto_window = false;
  ASSERT_TRUE(c->send(c->enc.headers(1, req("GET", "/big?n=50000000"), true)));
  auto r = c->response(1, 6000);
  // The client's window (65,535 bytes) is all it got; the gateway held at most its bounded
  // buffer, then gave up on the stream.
  EXPECT_LE(r.body.size(), 65535u);
  EXPECT_EQ(r.rst, h2::kCancel);
  EXPECT_EQ(records_with("stream_timeout").size(), 1u);
  // The connection still serves (a new stream, windows reopened).
  c->auto_window = true;
  ASSERT_TRUE(
      c->send(f::window_update(0, 1 << 20) + c->enc.headers(3, req("GET", "/data/x"), true)));
  EXPECT_EQ(c->response(3).status, 200);
}

class H2E2EOff : public H2E2E {
  void customize(GatewayOptions& o) override { o.http2 = false; }
};

TEST_F(H2E2EOff, WithHttp2OffALPNNeverSelectsH2) {
  H2Client c;
  EXPECT_FALSE(c.connect(proxy_port, authority(), "api.test", gateway_ca));
  if (std::system("curl --version 2>/dev/null | grep -q HTTP2") != 0) return;
  auto r = curl({"https://" + authority() + "/data/x"});
  EXPECT_EQ(r.http_code, 200);
  EXPECT_NE(r.headers.find("HTTP/1.1 200"), std::string::npos) << r.headers;
}

}  // namespace
}  // namespace cordon::gateway
