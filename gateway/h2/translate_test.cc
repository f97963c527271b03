#include "gateway/h2/translate.h"

#include <gtest/gtest.h>

namespace cordon::gateway::h2 {
namespace {

const std::string* find(const HeaderList& h, std::string_view name) {
  for (const auto& f : h) {
    if (ascii_iequals(f.name, name)) return &f.value;
  }
  return nullptr;
}

TEST(H2Translate, RequestGetsHostFirstAndJoinedCookies) {
  H2RequestHead r;
  r.method = "GET";
  r.scheme = "https";
  r.authority = "api.test";
  r.path = "/a?b=1";
  r.end_stream = true;
  r.headers = {{"cookie", "a=1"}, {"accept", "x"}, {"cookie", "b=2"}};
  auto m = to_http1_request(r);
  EXPECT_EQ(m.method, "GET");
  EXPECT_EQ(m.target, "/a?b=1");
  ASSERT_GE(m.headers.size(), 3u);
  EXPECT_EQ(m.headers[0].name, "host");
  EXPECT_EQ(m.headers[0].value, "api.test");
  EXPECT_EQ(*find(m.headers, "cookie"), "a=1; b=2");
  EXPECT_FALSE(m.chunked);
  EXPECT_FALSE(m.content_length);
}

TEST(H2Translate, RequestFraming) {
  H2RequestHead r;
  r.method = "POST";
  r.authority = "api.test";
  r.path = "/";
  r.end_stream = false;
  auto chunked = to_http1_request(r);
  EXPECT_TRUE(chunked.chunked);
  EXPECT_EQ(*find(chunked.headers, "transfer-encoding"), "chunked");
  r.content_length = 7;
  auto cl = to_http1_request(r);
  EXPECT_FALSE(cl.chunked);
  EXPECT_EQ(cl.content_length, 7u);
  EXPECT_EQ(find(cl.headers, "transfer-encoding"), nullptr);
  r.content_length.reset();
  r.end_stream = true;
  auto empty = to_http1_request(r);
  EXPECT_EQ(empty.content_length, 0u);
}

TEST(H2Translate, ResponseDropsConnectionFieldsAndSecrets) {
  detail::MessageHead resp;
  resp.status = 200;
  resp.headers = {{"Content-Type", "text/plain"},
                  {"Connection", "keep-alive, X-Hop"},
                  {"X-Hop", "1"},
                  {"Transfer-Encoding", "chunked"},
                  {"Keep-Alive", "timeout=5"},
                  {"X-Echo-Authorization", "Bearer s3cr3t-value"},
                  {"Content-Length", "12"}};
  auto out = to_h2_response(resp, {"s3cr3t-value"});
  EXPECT_EQ(out.status, 200);
  EXPECT_EQ(*find(out.headers, "content-type"), "text/plain");
  EXPECT_EQ(out.headers[0].name, "content-type");  // lower-cased
  EXPECT_EQ(find(out.headers, "x-hop"), nullptr);
  EXPECT_EQ(find(out.headers, "connection"), nullptr);
  EXPECT_EQ(find(out.headers, "transfer-encoding"), nullptr);
  EXPECT_EQ(find(out.headers, "keep-alive"), nullptr);
  EXPECT_EQ(find(out.headers, "x-echo-authorization"), nullptr);
  EXPECT_EQ(*find(out.headers, "content-length"), "12");
  ASSERT_EQ(out.scrubbed.size(), 1u);
  EXPECT_EQ(out.scrubbed[0], "x-echo-authorization");
}

TEST(H2Translate, TrailersScrubbed) {
  std::vector<std::string> scrubbed;
  auto t = to_h2_trailers(
      {{"Grpc-Status", "0"}, {"x-leak", "czNjcjN0LXZhbHVl"}, {"Content-Length", "1"}},
      {"s3cr3t-value"}, &scrubbed);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "grpc-status");
  ASSERT_EQ(scrubbed.size(), 1u);  // base64 of the secret
}

TEST(H2Translate, ChunksAndLastChunk) {
  std::string out;
  append_chunk(out, "hello");
  append_chunk(out, "");
  EXPECT_EQ(out, "5\r\nhello\r\n");
  out.clear();
  append_last_chunk(out, {{"x-sum", "1"}, {"authorization", "x"}, {"x-cred", "y"}, {"Bad", "z"}},
                    {"x-cred"});
  EXPECT_EQ(out, "0\r\nx-sum: 1\r\n\r\n");
}

}  // namespace
}  // namespace cordon::gateway::h2
