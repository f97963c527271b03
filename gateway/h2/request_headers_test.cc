#include "gateway/h2/request_headers.h"

#include <gtest/gtest.h>

namespace cordon::gateway::h2 {
namespace {

HeaderList base() {
  return {{":method", "GET"}, {":scheme", "https"}, {":authority", "api.test"}, {":path", "/x"}};
}

H2HeaderVerdict check(HeaderList h, bool end_stream = true) {
  return validate_request_headers(h, end_stream);
}

void expect_malformed(const HeaderList& h, const std::string& reason, bool end_stream = true) {
  auto v = check(h, end_stream);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.refusal, HeaderRefusal::kMalformed);
  EXPECT_EQ(v.reason, reason);
}

TEST(H2RequestHeaders, AcceptsAPlainRequest) {
  auto h = base();
  h.push_back({"accept", "*/*"});
  auto v = check(h);
  ASSERT_TRUE(v.ok()) << v.reason;
  EXPECT_EQ(v.head->method, "GET");
  EXPECT_EQ(v.head->authority, "api.test");
  EXPECT_EQ(v.head->path, "/x");
  ASSERT_EQ(v.head->headers.size(), 1u);
  EXPECT_TRUE(v.head->end_stream);
}

TEST(H2RequestHeaders, PseudoHeaderRules) {
  expect_malformed({{":scheme", "https"}, {":authority", "a"}, {":path", "/"}},
                   "pseudo_header_missing");
  expect_malformed({{":method", "GET"}, {":authority", "a"}, {":path", "/"}},
                   "pseudo_header_missing");
  expect_malformed({{":method", "GET"}, {":scheme", "https"}, {":authority", "a"}},
                   "pseudo_header_missing");
  auto rep = base();
  rep.push_back({":path", "/y"});
  expect_malformed(rep, "pseudo_header_repeated");
  HeaderList after = {{":method", "GET"},
                      {"accept", "x"},
                      {":scheme", "https"},
                      {":authority", "a"},
                      {":path", "/"}};
  expect_malformed(after, "pseudo_header_after_regular");
  auto unknown = base();
  unknown.insert(unknown.begin(), {":status", "200"});
  expect_malformed(unknown, "unknown_pseudo_header");
  auto proto = base();
  proto.insert(proto.begin(), {":protocol", "websocket"});
  expect_malformed(proto, "extended_connect_not_enabled");
}

TEST(H2RequestHeaders, FieldSyntax) {
  auto upper = base();
  upper.push_back({"Accept", "x"});
  expect_malformed(upper, "uppercase_header_name");
  auto crlf = base();
  crlf.push_back({"x-a", "1\r\nx-b: 2"});
  expect_malformed(crlf, "invalid_header_value");
  auto nul = base();
  nul.push_back({"x-a", std::string("a\0b", 3)});
  expect_malformed(nul, "invalid_header_value");
  auto ws = base();
  ws.push_back({"x-a", " padded"});
  expect_malformed(ws, "header_value_whitespace");
  auto colon = base();
  colon.push_back({"x:y", "1"});
  expect_malformed(colon, "invalid_header_name");
  auto empty = base();
  empty.push_back({"", "1"});
  expect_malformed(empty, "empty_header_name");
}

TEST(H2RequestHeaders, ConnectionSpecificAndTe) {
  for (const char* n : {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                        "upgrade", "http2-settings"}) {
    auto h = base();
    h.push_back({n, "x"});
    expect_malformed(h, "connection_specific_header");
  }
  auto te = base();
  te.push_back({"te", "gzip"});
  expect_malformed(te, "te_not_trailers");
  auto ok = base();
  ok.push_back({"te", "trailers"});
  EXPECT_TRUE(check(ok).ok());
}

TEST(H2RequestHeaders, ContentLength) {
  auto h = base();
  h[0].value = "POST";
  h.push_back({"content-length", "5"});
  auto v = check(h, false);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.head->content_length, 5u);
  EXPECT_TRUE(v.head->headers.empty());  // restated by the translation
  expect_malformed(h, "content_length_mismatch", true);
  auto two = h;
  two.push_back({"content-length", "6"});
  expect_malformed(two, "content_length_repeated", false);
  auto same = h;
  same.push_back({"content-length", "5"});
  EXPECT_TRUE(check(same, false).ok());
  auto bad = base();
  bad.push_back({"content-length", "5, 5"});
  expect_malformed(bad, "content_length_invalid", false);
  auto huge = base();
  huge.push_back({"content-length", "99999999999999999999"});
  expect_malformed(huge, "content_length_invalid", false);
}

TEST(H2RequestHeaders, AuthorityAndHost) {
  auto same = base();
  same.push_back({"host", "API.test"});
  auto v = check(same);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v.head->headers.empty());  // host restated from :authority
  auto other = base();
  other.push_back({"host", "paste.test"});
  auto vo = check(other);
  ASSERT_FALSE(vo.ok());
  EXPECT_EQ(vo.refusal, HeaderRefusal::kRespond);
  EXPECT_EQ(vo.reason, "host_authority_mismatch");
  HeaderList host_only = {
      {":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {"host", "api.test"}};
  auto vh = check(host_only);
  ASSERT_TRUE(vh.ok());
  EXPECT_EQ(vh.head->authority, "api.test");
  HeaderList none = {{":method", "GET"}, {":scheme", "https"}, {":path", "/"}};
  EXPECT_EQ(check(none).reason, "authority_missing");
  auto userinfo = base();
  userinfo[2].value = "user@api.test";
  expect_malformed(userinfo, "authority_userinfo");
  auto two_hosts = base();
  two_hosts.push_back({"host", "api.test"});
  two_hosts.push_back({"host", "api.test"});
  EXPECT_EQ(check(two_hosts).reason, "host_repeated");
}

TEST(H2RequestHeaders, SchemePathAndConnect) {
  auto http = base();
  http[1].value = "http";
  auto v = check(http);
  EXPECT_EQ(v.reason, "scheme_mismatch");
  EXPECT_EQ(v.refusal, HeaderRefusal::kRespond);
  auto abs = base();
  abs[3].value = "http://other.test/";
  expect_malformed(abs, "invalid_path");
  for (const char* p : {"/a b", "/a\tb", "/a#frag", "/caf\xc3\xa9", "/x HTTP/1.1\r\nHost: evil"}) {
    auto h = base();
    h[3].value = p;
    auto v = check(h);
    EXPECT_FALSE(v.ok()) << p;
  }
  auto star = base();
  star[3].value = "*";
  expect_malformed(star, "invalid_path");
  star[0].value = "OPTIONS";
  EXPECT_TRUE(check(star).ok());
  HeaderList connect = {{":method", "CONNECT"}, {":authority", "evil.test:443"}};
  auto vc = check(connect, false);
  EXPECT_EQ(vc.reason, "nested_connect");
  EXPECT_EQ(vc.refusal, HeaderRefusal::kRespond);
}

TEST(H2RequestHeaders, Trailers) {
  EXPECT_FALSE(validate_trailers({{"grpc-status", "0"}, {"x-t", "1"}}));
  EXPECT_EQ(validate_trailers({{":status", "200"}}), "pseudo_header_in_trailers");
  EXPECT_EQ(validate_trailers({{"transfer-encoding", "chunked"}}), "connection_specific_header");
  EXPECT_EQ(validate_trailers({{"X-Up", "1"}}), "uppercase_header_name");
}

}  // namespace
}  // namespace cordon::gateway::h2
