// H2ClientSession against H2ServerSession, in memory: a request with a never-indexed field,
// request body and trailers, the response head, body and trailers, flow control both ways,
// and resets.
#include "gateway/h2/client_session.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "gateway/h2/limits.h"
#include "gateway/h2/protocol_cache.h"
#include "gateway/h2/server_session.h"

namespace cordon::gateway::h2 {
namespace {

struct Pair {
  H2Limits limits;
  H2ClientSession client{limits};
  H2ServerSession server{limits};
  // Moves bytes both ways until neither side has anything to send.
  void pump() {
    for (int i = 0; i < 100; ++i) {
      std::string a, b;
      client.produce(a, 1 << 20);
      if (!a.empty()) server.receive(reinterpret_cast<const uint8_t*>(a.data()), a.size(), 1);
      server.produce(b, 1 << 20);
      if (!b.empty()) client.receive(reinterpret_cast<const uint8_t*>(b.data()), b.size());
      if (a.empty() && b.empty()) return;
    }
  }
};

TEST(H2ClientSession, RequestAndResponseWithTrailersAndNeverIndexedFields) {
  Pair p;
  int32_t id = p.client.submit(
      "POST", "api.test", "/svc/Echo",
      {{"content-type", "application/grpc"}, {"x-api-key", "s3cret", true}, {"te", "trailers"}},
      false);
  ASSERT_GT(id, 0);
  p.client.send_data(id, "hello");
  p.client.finish_request(id, {{"x-req-trailer", "1"}});
  p.pump();
  H2Stream* st = p.server.stream(id);
  ASSERT_NE(st, nullptr);
  ASSERT_TRUE(st->request_ready);
  EXPECT_EQ(st->head.path, "/svc/Echo");
  EXPECT_EQ(st->body_in, "hello");
  EXPECT_TRUE(st->end_in);
  ASSERT_EQ(st->trailers_in.size(), 1u);
  // The field sent never-indexed is known as such on the other side.
  EXPECT_NE(std::find(st->never_indexed.begin(), st->never_indexed.end(), "x-api-key"),
            st->never_indexed.end());
  p.server.consume(id, st->body_in.size());
  ASSERT_TRUE(p.server.respond(id, 200, {{"content-type", "application/grpc"}}, false));
  p.server.send_data(id, "world");
  p.server.finish_response(id, {{"grpc-status", "0"}});
  p.pump();
  H2UpstreamStream* us = p.client.stream(id);
  ASSERT_NE(us, nullptr);
  EXPECT_TRUE(us->head_ready);
  EXPECT_EQ(us->status, 200);
  EXPECT_EQ(us->body_in, "world");
  EXPECT_TRUE(us->end_in);
  ASSERT_EQ(us->trailers.size(), 1u);
  EXPECT_EQ(us->trailers[0].value, "0");
  EXPECT_EQ(us->sent, 5u);
}

TEST(H2ClientSession, ResponseWindowReopensOnlyAsTheCallerConsumes) {
  Pair p;
  int32_t id = p.client.submit("GET", "api.test", "/big", {}, true);
  p.pump();
  ASSERT_TRUE(p.server.respond(id, 200, {}, false));
  p.server.send_data(id, std::string(1 << 20, 'x'));
  p.pump();
  H2UpstreamStream* us = p.client.stream(id);
  ASSERT_NE(us, nullptr);
  // The upstream could send one stream window (stream_response_buffer_bytes), no more.
  EXPECT_EQ(us->body_in.size(), p.limits.clamped().stream_response_buffer_bytes);
  size_t first = us->body_in.size();
  p.client.consume(id, first);
  us->body_in.clear();
  p.pump();
  EXPECT_EQ(us->body_in.size(), first);
}

TEST(H2ClientSession, PeerResetIsReportedAndForgetCancels) {
  Pair p;
  int32_t a = p.client.submit("GET", "api.test", "/a", {}, true);
  int32_t b = p.client.submit("GET", "api.test", "/b", {}, true);
  p.pump();
  p.server.reset(a, kRefusedStream);
  p.pump();
  H2UpstreamStream* ua = p.client.stream(a);
  ASSERT_NE(ua, nullptr);
  EXPECT_TRUE(ua->closed);
  EXPECT_TRUE(ua->reset_by_peer);
  EXPECT_EQ(ua->close_error, kRefusedStream);
  EXPECT_EQ(p.client.peer_resets(), 1u);
  p.client.forget(b);  // the sandbox went away: the upstream stream is cancelled
  p.pump();
  H2Stream* sb = p.server.stream(b);
  ASSERT_NE(sb, nullptr);
  EXPECT_TRUE(sb->closed);
  EXPECT_EQ(sb->close_error, kCancel);
}

TEST(ProtocolCache, BoundedLruAndAged) {
  ProtocolCache cache(2, 1000);
  cache.put("a", UpstreamProtocol::kH2, 0);
  cache.put("b", UpstreamProtocol::kHttp1, 0);
  EXPECT_EQ(cache.get("a", 10), UpstreamProtocol::kH2);  // a is now the most recent
  cache.put("c", UpstreamProtocol::kH2, 10);             // b goes
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.get("b", 10), UpstreamProtocol::kUnknown);
  EXPECT_EQ(cache.get("c", 500), UpstreamProtocol::kH2);
  EXPECT_EQ(cache.get("a", 1500), UpstreamProtocol::kUnknown);  // aged out
}

TEST(H2LimitsConfig, ValidateAndSetNameTheFieldAndBounds) {
  H2Limits l;
  EXPECT_TRUE(validate(l));
  EXPECT_TRUE(set_h2_limit(l, "max_concurrent_streams", 50));
  EXPECT_EQ(l.max_concurrent_streams, 50u);
  EXPECT_TRUE(set_h2_limit(l, "resets.burst", 10));
  EXPECT_EQ(l.resets.burst, 10u);
  auto bad = set_h2_limit(l, "max_concurrent_streams", 5000);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("max_concurrent_streams"), std::string::npos);
  EXPECT_NE(bad.error().message.find("[1, 1000]"), std::string::npos);
  auto unknown = set_h2_limit(l, "max_streams", 1);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("unknown h2 limit 'max_streams'"), std::string::npos);
  l.stream_window_bytes = 1 << 20;
  l.connection_window_bytes = 512 * 1024;
  auto cross = validate(l);
  ASSERT_FALSE(cross);
  EXPECT_NE(cross.error().message.find("connection_window_bytes"), std::string::npos);
  H2Limits zero;
  zero.max_header_count = 0;
  EXPECT_FALSE(validate(zero));
  for (const auto& f : h2_limit_fields()) {
    H2Limits d;
    EXPECT_GE(f.get(d), f.min) << f.name;  // the defaults are valid
    EXPECT_LE(f.get(d), f.max) << f.name;
  }
}

}  // namespace
}  // namespace cordon::gateway::h2
