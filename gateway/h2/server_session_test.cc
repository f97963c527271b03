#include "gateway/h2/server_session.h"

#include <gtest/gtest.h>

#include "gateway/h2/testing/frames.h"

namespace cordon::gateway::h2 {
namespace {

namespace t = testing;

class H2Session : public ::testing::Test {
 protected:
  void make(H2Limits l = {}) { s = std::make_unique<H2ServerSession>(l); }
  void SetUp() override { make(); }
  bool feed(const std::string& bytes, uint64_t now = 0) {
    return s->receive(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), now);
  }
  std::vector<t::Frame> out() {
    s->produce(wire, 1 << 30);
    return t::read_frames(wire);
  }
  std::vector<H2Event> events() {
    auto e = std::move(s->events());
    s->events().clear();
    return e;
  }
  static const t::Frame* find(const std::vector<t::Frame>& fs, uint8_t type, int32_t stream = -1) {
    for (const auto& f : fs) {
      if (f.type == type && (stream < 0 || f.stream == stream)) return &f;
    }
    return nullptr;
  }
  std::unique_ptr<H2ServerSession> s;
  t::Encoder enc;
  t::Decoder dec;
  std::string wire;
};

TEST_F(H2Session, GetBecomesARequestAndTheResponseGoesOut) {
  ASSERT_TRUE(feed(t::preface() + enc.headers(1, t::request("GET", "api.test", "/x"), true)));
  auto ev = events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, H2EventKind::kRequest);
  EXPECT_EQ(ev[1].kind, H2EventKind::kEnd);
  H2Stream* st = s->stream(1);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->head.authority, "api.test");
  ASSERT_TRUE(s->respond(1, 200, {{"content-type", "text/plain"}}, false));
  s->send_data(1, "hello");
  s->finish_response(1, {{"grpc-status", "0"}});
  auto fs = out();
  ASSERT_NE(find(fs, t::kSettings), nullptr);  // ours first
  const t::Frame* h = find(fs, t::kHeaders, 1);
  ASSERT_NE(h, nullptr);
  auto fields = dec.decode(*h);
  ASSERT_FALSE(fields.empty());
  EXPECT_EQ(fields[0], (std::pair<std::string, std::string>{":status", "200"}));
  const t::Frame* d = find(fs, t::kData, 1);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->payload, "hello");
  EXPECT_FALSE(d->flags & t::kEndStream);  // trailers end the stream
  const t::Frame* trailers = nullptr;
  for (const auto& f : fs) {
    if (f.type == t::kHeaders && &f != h) trailers = &f;
  }
  ASSERT_NE(trailers, nullptr);
  EXPECT_TRUE(trailers->flags & t::kEndStream);
  EXPECT_EQ(dec.decode(*trailers)[0].first, "grpc-status");
  auto closing = events();
  bool closed = false;
  for (auto e : closing) closed = closed || e.kind == H2EventKind::kClosed;
  EXPECT_TRUE(closed);
  s->forget(1);
  EXPECT_EQ(s->stream_count(), 0u);
}

TEST_F(H2Session, MalformedStreamIsResetAndTheNextOneServed) {
  auto bad = t::request("GET", "api.test", "/");
  bad.push_back({"keep-alive", "1"});
  // (One encoder call per statement: HPACK blocks must be made in wire order.)
  std::string bytes = t::preface() + enc.headers(1, bad, true);
  bytes += enc.headers(3, t::request("GET", "api.test", "/ok"), true);
  ASSERT_TRUE(feed(bytes));
  auto ev = events();
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, H2EventKind::kRejected);
  EXPECT_EQ(s->stream(1)->reject_reason, "connection_specific_header");
  EXPECT_EQ(ev[1].kind, H2EventKind::kRequest);
  EXPECT_EQ(ev[1].stream, 3);
  auto fs = out();
  const t::Frame* rst = find(fs, t::kRstStream, 1);
  ASSERT_NE(rst, nullptr);
  EXPECT_EQ(t::rst_code(*rst), kProtocolError);
  EXPECT_EQ(find(fs, t::kGoaway), nullptr);
}

TEST_F(H2Session, ContentLengthMustMatchData) {
  auto req = t::request("POST", "api.test", "/up");
  req.push_back({"content-length", "5"});
  ASSERT_TRUE(feed(t::preface() + enc.headers(1, req, false) + t::data(1, "123456", true)));
  EXPECT_EQ(s->stream(1)->reject_reason, "content_length_mismatch");
  ASSERT_TRUE(feed(enc.headers(3, req, false) + t::data(3, "1234", true)));
  EXPECT_EQ(s->stream(3)->reject_reason, "content_length_mismatch");
  ASSERT_TRUE(feed(enc.headers(5, req, false) + t::data(5, "12345", true)));
  EXPECT_FALSE(s->stream(5)->rejected);
  EXPECT_TRUE(s->stream(5)->end_in);
  EXPECT_EQ(s->stream(5)->body_in, "12345");
}

TEST_F(H2Session, WindowReopensOnlyAsTheBodyIsConsumed) {
  H2Limits l;
  l.stream_window_bytes = 16 * 1024;
  make(l);
  auto req = t::request("POST", "api.test", "/up");
  ASSERT_TRUE(feed(t::preface() + t::settings_ack() + enc.headers(1, req, false)));
  out();
  std::string chunk(16 * 1024, 'x');
  ASSERT_TRUE(feed(t::data(1, chunk, false)));
  auto fs = out();
  EXPECT_EQ(find(fs, t::kWindowUpdate, 1), nullptr);
  // Past the window: a flow-control error, not more buffering.
  std::string more(1, 'y');
  H2Stream* st = s->stream(1);
  EXPECT_EQ(st->body_in.size(), chunk.size());
  s->consume(1, st->body_in.size());
  st->body_in.clear();
  fs = out();
  EXPECT_NE(find(fs, t::kWindowUpdate, 1), nullptr);
}

TEST_F(H2Session, RapidResetEndsTheConnection) {
  H2Limits l;
  l.resets = {50, 10};
  make(l);
  std::string bytes = t::preface();
  for (int32_t id = 1; id < 2 * 60; id += 2) {
    bytes += enc.headers(id, t::request("GET", "api.test", "/"), false);
    bytes += t::rst_stream(id, kCancel);
  }
  EXPECT_FALSE(feed(bytes));
  EXPECT_EQ(s->end_reason(), "reset_flood");
  auto fs = out();
  const t::Frame* g = find(fs, t::kGoaway);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(t::goaway_code(*g), kEnhanceYourCalm);
}

TEST_F(H2Session, ProvokedResetsCountToo) {
  H2Limits l;
  l.resets = {20, 1};
  make(l);
  std::string bytes = t::preface();
  auto bad = t::request("GET", "api.test", "/");
  bad.push_back({"connection", "close"});
  for (int32_t id = 1; id < 2 * 30; id += 2) bytes += enc.headers(id, bad, true);
  feed(bytes);
  out();  // the resets are counted as they are sent
  EXPECT_EQ(s->end_reason(), "reset_flood");
}

TEST_F(H2Session, ContinuationFloodEndsTheConnection) {
  H2Limits l;
  l.max_continuation_frames = 4;
  make(l);
  std::string block = enc.block(t::request("GET", "api.test", "/"));
  std::string bytes = t::preface() + t::frame(t::kHeaders, t::kEndStream, 1, block);
  for (int i = 0; i < 10; ++i) bytes += t::frame(t::kContinuation, 0, 1, "");
  EXPECT_FALSE(feed(bytes));
  EXPECT_TRUE(s->end_reason() == "continuation_flood" || s->end_reason() == "empty_frame_flood")
      << s->end_reason();
  auto fs = out();
  const t::Frame* g = find(fs, t::kGoaway);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(t::goaway_code(*g), kEnhanceYourCalm);
}

TEST_F(H2Session, LargeHeaderListIs431AndABombEndsTheConnection) {
  H2Limits l;
  l.max_header_list_bytes = 2048;
  make(l);
  auto big = t::request("GET", "api.test", "/");
  big.push_back({"x-big", std::string(3000, 'a')});
  ASSERT_TRUE(feed(t::preface() + enc.headers(1, big, true)));
  H2Stream* st = s->stream(1);
  ASSERT_TRUE(st && st->rejected);
  EXPECT_EQ(st->reject_status, 431);
  EXPECT_EQ(st->refusal, HeaderRefusal::kRespond);
  // The same indexed field repeated: a few bytes on the wire, megabytes decoded.
  auto bomb = t::request("GET", "api.test", "/");
  for (int i = 0; i < 40; ++i) bomb.push_back({"x-big", std::string(3000, 'a')});
  EXPECT_FALSE(feed(enc.headers(3, bomb, true)));
  EXPECT_EQ(s->end_reason(), "hpack_bomb");
}

TEST_F(H2Session, ControlFrameFloods) {
  struct Case {
    std::string frame;
    std::string reason;
  };
  std::vector<Case> cases = {{t::ping(), "ping_flood"},
                             {t::frame(t::kSettings, 0, 0, ""), "settings_flood"},
                             {t::priority(1, 0), "priority_flood"},
                             {t::window_update(0, 1), "window_update_flood"}};
  for (const auto& c : cases) {
    make();
    std::string bytes = t::preface();
    for (int i = 0; i < 5000; ++i) bytes += c.frame;
    feed(bytes);
    EXPECT_EQ(s->end_reason(), c.reason);
  }
  make();
  std::string bytes = t::preface() + enc.headers(1, t::request("POST", "api.test", "/"), false);
  for (int i = 0; i < 500; ++i) bytes += t::data(1, "", false);
  feed(bytes);
  EXPECT_EQ(s->end_reason(), "empty_frame_flood");
}

TEST_F(H2Session, BadPrefaceIsRefused) {
  EXPECT_FALSE(feed("GET / HTTP/1.1\r\nHost: api.test\r\n\r\n"));
  EXPECT_EQ(s->end_reason(), "bad_client_preface");
}

TEST_F(H2Session, ConcurrentStreamsAreCapped) {
  H2Limits l;
  l.max_concurrent_streams = 4;
  // Before the client acknowledged our SETTINGS: the stream past the cap is refused.
  make(l);
  std::string bytes = t::preface();
  for (int32_t id = 1; id <= 9; id += 2)
    bytes += enc.headers(id, t::request("GET", "api.test", "/"), false);
  feed(bytes);
  int requests = 0;
  for (auto e : events()) requests += e.kind == H2EventKind::kRequest;
  EXPECT_EQ(requests, 4);
  auto fs = out();
  const t::Frame* rst = find(fs, t::kRstStream, 9);
  ASSERT_NE(rst, nullptr);
  EXPECT_EQ(t::rst_code(*rst), kRefusedStream);
  // After it acknowledged them, going past the cap ends the connection.
  make(l);
  t::Encoder enc2;
  bytes = t::preface() + t::settings_ack();
  for (int32_t id = 1; id <= 9; id += 2)
    bytes += enc2.headers(id, t::request("GET", "api.test", "/"), false);
  feed(bytes);
  fs = out();
  const t::Frame* g = find(fs, t::kGoaway);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(t::goaway_code(*g), kProtocolError);
}

TEST_F(H2Session, PushPromiseFromTheClientIsAConnectionError) {
  feed(t::preface() + t::frame(t::kPushPromise, t::kEndHeaders, 1, std::string(4, '\0')));
  auto fs = out();
  const t::Frame* g = find(fs, t::kGoaway);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(t::goaway_code(*g), kProtocolError);
}

}  // namespace
}  // namespace cordon::gateway::h2
