// ResponseRelay over in-memory streams: what the sandbox receives for each shape of upstream
// response, and how the relay says the exchange ended (audit reason, reuse of the upstream).
#include "gateway/detail/response_relay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace cordon::gateway::detail {
namespace {

// A ByteStream over strings: reads return the scripted pieces (each at most one read), then
// EOF; writes are collected.
class MemoryStream final : public ByteStream {
 public:
  MemoryStream(asio::io_context& io, std::vector<std::string> reads)
      : sock_(io), reads_(std::move(reads)) {}
  awaitable<size_t> read_some(asio::mutable_buffer b, error_code& ec) override {
    if (next_ == reads_.size()) {
      ec = asio::error::eof;
      co_return 0;
    }
    const std::string& r = reads_[next_];
    size_t n = std::min(b.size(), r.size() - off_);
    std::memcpy(b.data(), r.data() + off_, n);
    off_ += n;
    if (off_ == r.size()) {
      ++next_;
      off_ = 0;
    }
    co_return n;
  }
  awaitable<void> write_all(asio::const_buffer b, error_code& ec) override {
    if (fail_writes) {
      ec = asio::error::broken_pipe;
      co_return;
    }
    written.append(static_cast<const char*>(b.data()), b.size());
    ++writes;
  }
  tcp::socket& socket() override { return sock_; }

  std::string written;
  int writes = 0;
  bool fail_writes = false;

 private:
  tcp::socket sock_;
  std::vector<std::string> reads_;
  size_t next_ = 0, off_ = 0;
};

struct Relayed {
  RelayOutcome outcome;
  std::string to_client;
  int client_writes = 0;
  std::string upstream_pending;
};

Relayed relay(std::vector<std::string> upstream_reads, RelayRequest request = {},
              bool client_fails = false) {
  asio::io_context io;
  MemoryStream upstream(io, std::move(upstream_reads));
  MemoryStream client(io, {});
  client.fail_writes = client_fails;
  Deadline deadline(io.get_executor());
  Limits limits;
  ResponseRelay r(upstream, client, deadline, limits, request);
  std::exception_ptr failure;
  asio::co_spawn(io, r.run(), [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) std::rethrow_exception(failure);
  return Relayed{r.outcome(), client.written, client.writes, std::string(r.upstream_pending())};
}

TEST(GatewayResponseRelay, ContentLengthResponseArrivesWholeAndTheUpstreamIsReusable) {
  Relayed r = relay({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nX-A: 1\r\n\r\nhello", "world"});
  EXPECT_EQ(r.outcome.status, 200);
  EXPECT_TRUE(r.outcome.head_sent);
  EXPECT_FALSE(r.outcome.upstream_failed);
  EXPECT_FALSE(r.outcome.client_error);
  EXPECT_FALSE(r.outcome.close_client);
  EXPECT_TRUE(r.outcome.upstream_reusable);
  EXPECT_EQ(r.outcome.body_bytes, 10u);
  EXPECT_EQ(r.to_client.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r.to_client;
  EXPECT_NE(r.to_client.find("X-A: 1\r\n"), std::string::npos);
  EXPECT_EQ(r.to_client.substr(r.to_client.size() - 10), "helloworld");
}

TEST(GatewayResponseRelay, HeadAndBodyAtHandGoInOneClientWrite) {
  Relayed r = relay({"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"});
  EXPECT_EQ(r.client_writes, 1);
  EXPECT_TRUE(r.outcome.upstream_reusable);
}

TEST(GatewayResponseRelay, InterimResponsesAreDropped) {
  Relayed r = relay({"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"});
  EXPECT_EQ(r.outcome.status, 204);
  EXPECT_EQ(r.to_client.rfind("HTTP/1.1 204", 0), 0u) << r.to_client;
  EXPECT_EQ(r.to_client.find("100 Continue"), std::string::npos);
}

TEST(GatewayResponseRelay, SwitchingProtocolsWithoutACheckedUpgradeIsAnUpstreamError) {
  Relayed r =
      relay({"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
             "Upgrade: websocket\r\n\r\n"});
  EXPECT_TRUE(r.outcome.upstream_failed);
  EXPECT_EQ(r.outcome.upstream_failure, "upgrade_not_supported");
  EXPECT_FALSE(r.outcome.head_sent);
  EXPECT_TRUE(r.to_client.empty());
  EXPECT_FALSE(r.outcome.upstream_reusable);
}

TEST(GatewayResponseRelay, CheckedWebSocketUpgradeSwitchesAndKeepsTheFramesAfterTheHead) {
  RelayRequest ws;
  ws.websocket = true;
  Relayed r = relay({"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                     "Upgrade: websocket\r\n\r\n\x81\x02hi"},
                    ws);
  EXPECT_TRUE(r.outcome.switched);
  EXPECT_EQ(r.outcome.status, 101);
  EXPECT_EQ(r.to_client.rfind("HTTP/1.1 101", 0), 0u) << r.to_client;
  EXPECT_EQ(r.upstream_pending, "\x81\x02hi");
  EXPECT_FALSE(r.outcome.upstream_reusable);
}

TEST(GatewayResponseRelay, UpstreamClosingEarlyIsNamed) {
  Relayed before_head = relay({});
  EXPECT_EQ(before_head.outcome.upstream_failure, "upstream_closed");
  EXPECT_FALSE(before_head.outcome.head_sent);

  Relayed mid_body = relay({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel"});
  EXPECT_EQ(mid_body.outcome.upstream_failure, "upstream_reset_mid_response");
  EXPECT_TRUE(mid_body.outcome.head_sent);
  EXPECT_FALSE(mid_body.outcome.upstream_reusable);
}

TEST(GatewayResponseRelay, MalformedResponseIsABadUpstreamResponse) {
  Relayed r = relay({"NOT HTTP AT ALL\r\n\r\n"});
  EXPECT_TRUE(r.outcome.upstream_failed);
  EXPECT_EQ(r.outcome.upstream_failure, "bad_upstream_response");
  EXPECT_TRUE(r.to_client.empty());
}

TEST(GatewayResponseRelay, EofDelimitedBodyClosesTheClientConnection) {
  Relayed r = relay({"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"});
  EXPECT_FALSE(r.outcome.upstream_failed);
  EXPECT_TRUE(r.outcome.close_client);
  EXPECT_FALSE(r.outcome.upstream_reusable);
  EXPECT_EQ(r.to_client.substr(r.to_client.size() - 9), "all of it");
}

TEST(GatewayResponseRelay, RequestThatClosesMakesTheClientConnectionClose) {
  RelayRequest closing;
  closing.keep_alive = false;
  Relayed r = relay({"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"}, closing);
  EXPECT_TRUE(r.outcome.close_client);
  EXPECT_NE(r.to_client.find("Connection: close"), std::string::npos) << r.to_client;
}

TEST(GatewayResponseRelay, HeadResponseHasNoBody) {
  RelayRequest head;
  head.head_request = true;
  Relayed r = relay({"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"}, head);
  EXPECT_FALSE(r.outcome.upstream_failed);
  EXPECT_EQ(r.outcome.body_bytes, 0u);
  EXPECT_TRUE(r.outcome.upstream_reusable);
}

TEST(GatewayResponseRelay, SecretsEchoedInTheBodyAreOverwritten) {
  std::vector<std::string> secrets = {"ghp_SECRET_VALUE"};
  RelayRequest scrub;
  scrub.scrub_values = &secrets;
  scrub.body_secrets = &secrets;
  std::string body = "echo: ghp_SECRET_VALUE!";
  Relayed r = relay(
      {"HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n", body},
      scrub);
  EXPECT_FALSE(r.outcome.upstream_failed);
  EXPECT_EQ(r.to_client.find("ghp_SECRET_VALUE"), std::string::npos) << r.to_client;
  EXPECT_EQ(r.outcome.secrets_scrubbed, 1u);
  // Identity coding: scrubbed in place, the length stays.
  EXPECT_NE(r.to_client.find("Content-Length: " + std::to_string(body.size())), std::string::npos);
}

TEST(GatewayResponseRelay, UnscannableCodingIsRefusedWhenScrubbing) {
  std::vector<std::string> secrets = {"ghp_SECRET_VALUE"};
  RelayRequest scrub;
  scrub.body_secrets = &secrets;
  Relayed r =
      relay({"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc"}, scrub);
  EXPECT_EQ(r.outcome.upstream_failure, "unscannable_content_encoding");
  EXPECT_FALSE(r.outcome.head_sent);
}

TEST(GatewayResponseRelay, ClientWriteFailureEndsTheRelay) {
  Relayed r = relay({"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"}, {}, /*client_fails=*/true);
  EXPECT_TRUE(r.outcome.client_error);
  EXPECT_FALSE(r.outcome.upstream_failed);
  EXPECT_FALSE(r.outcome.upstream_reusable);
}

}  // namespace
}  // namespace cordon::gateway::detail
