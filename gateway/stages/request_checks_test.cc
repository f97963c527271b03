// Request-head checks, table-driven. Case names carry the threat number of
// specs/egress-threats.md they cover (T1 = threat 1, ...).
#include "gateway/stages/request_checks.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cordon::gateway {
namespace {

ChannelFacts tls(std::string sni = "api.example.com", uint16_t port = 443) {
  ChannelFacts f;
  f.channel = Channel::kInterceptedTls;
  f.sni = std::move(sni);
  f.port = port;
  return f;
}

ChannelFacts plain(std::string dst = "203.0.113.7", uint16_t port = 80) {
  ChannelFacts f;
  f.channel = Channel::kPlainTransparent;
  f.original_destination = std::move(dst);
  f.port = port;
  return f;
}

ChannelFacts proxy() {
  ChannelFacts f;
  f.channel = Channel::kProxy;
  f.port = 3128;
  return f;
}

RequestHead req(std::string method, std::string target, HeaderList headers, int minor = 1) {
  RequestHead h;
  h.method = std::move(method);
  h.target = std::move(target);
  h.version_minor = minor;
  h.headers = std::move(headers);
  return h;
}

const Header kHost{"Host", "api.example.com"};

struct Case {
  const char* name;
  ChannelFacts facts;
  RequestHead head;
  int status;          // 0 = accepted
  const char* reason;  // expected reason code when refused
};

std::vector<Case> refused_cases() {
  std::vector<Case> v;
  // Destination identity.
  v.push_back({"T1_HostDiffersFromSni", tls(), req("GET", "/", {{"Host", "evil.example"}}), 421,
               "host_sni_mismatch"});
  v.push_back({"T1_HostIpLiteralInsideTls", tls(), req("GET", "/", {{"Host", "203.0.113.9"}}), 421,
               "host_sni_mismatch"});
  v.push_back({"T1_HostSubdomainOfSni", tls(), req("GET", "/", {{"Host", "x.api.example.com"}}),
               421, "host_sni_mismatch"});
  v.push_back({"T1_HostWithUserinfo", tls(),
               req("GET", "/", {{"Host", "api.example.com@evil.example"}}), 400, "host_invalid"});
  v.push_back({"T4_HostPortDiffers", tls(), req("GET", "/", {{"Host", "api.example.com:8443"}}),
               400, "host_port_mismatch"});
  v.push_back({"HostMissing", tls(), req("GET", "/", {}), 400, "host_missing"});
  v.push_back({"HostRepeated", tls(), req("GET", "/", {kHost, kHost}), 400, "host_repeated"});
  v.push_back({"HostEmpty", tls(), req("GET", "/", {{"Host", ""}}), 400, "host_invalid"});
  v.push_back({"HostLeadingHyphen", tls(), req("GET", "/", {{"Host", "-api.example.com"}}), 400,
               "host_invalid"});
  v.push_back({"HostBadPort", tls(), req("GET", "/", {{"Host", "api.example.com:99999"}}), 400,
               "host_invalid"});
  v.push_back(
      {"HostShortIpv4", plain(), req("GET", "/", {{"Host", "127.1"}}), 400, "host_invalid"});
  v.push_back({"T5_PlainIpHostDiffersFromDialled", plain("203.0.113.7"),
               req("GET", "/", {{"Host", "198.51.100.1"}}), 403, "host_ip_mismatch"});
  v.push_back({"T5_PlainIpv6HostDiffers", plain("2001:db8::1"),
               req("GET", "/", {{"Host", "[2001:db8::2]"}}), 403, "host_ip_mismatch"});
  {
    ChannelFacts f = tls();
    f.connect_host = "other.example";
    v.push_back(
        {"T6_ConnectHostDiffersFromSni", f, req("GET", "/", {kHost}), 403, "connect_sni_mismatch"});
  }
  v.push_back({"T7_AbsoluteFormOtherHostInTls", tls(),
               req("GET", "https://other.example/x", {kHost}), 421, "absolute_form_host_mismatch"});
  v.push_back({"T7_AbsoluteFormHttpSchemeInTls", tls(),
               req("GET", "http://api.example.com/x", {kHost}), 400, "scheme_mismatch"});
  v.push_back({"T7_AbsoluteFormUserinfo", tls(),
               req("GET", "https://api.example.com@evil.example/x", {kHost}), 400,
               "target_invalid_authority"});
  v.push_back({"T7_AbsoluteFormPortDiffers", tls(),
               req("GET", "https://api.example.com:8443/x", {kHost}), 400, "host_port_mismatch"});
  v.push_back({"T7_PlainAbsoluteFormOtherHost", plain(),
               req("GET", "http://evil.example/", {{"Host", "api.example.com"}}), 403,
               "absolute_form_host_mismatch"});
  v.push_back({"T8_ConnectInsideTls", tls(),
               req("CONNECT", "evil.example:443", {{"Host", "evil.example:443"}}), 403,
               "nested_connect"});
  v.push_back({"T8_ConnectOverPlain", plain(),
               req("CONNECT", "evil.example:443", {{"Host", "evil.example:443"}}), 403,
               "nested_connect"});
  v.push_back({"T9_NoSni", tls(""), req("GET", "/", {kHost}), 403, "no_sni"});
  // Target forms.
  v.push_back(
      {"AsteriskNotOptions", tls(), req("GET", "*", {kHost}), 400, "asterisk_form_not_options"});
  v.push_back({"AuthorityFormWithoutConnect", tls(), req("GET", "api.example.com:443", {kHost}),
               400, "target_form_invalid"});
  v.push_back({"TargetWithSpace", tls(), req("GET", "/a b", {kHost}), 400, "target_invalid_bytes"});
  v.push_back(
      {"TargetWithFragment", tls(), req("GET", "/a#b", {kHost}), 400, "target_invalid_bytes"});
  v.push_back({"T13_TargetWithNul", tls(), req("GET", std::string("/a\0b", 4), {kHost}), 400,
               "target_invalid_bytes"});
  v.push_back({"T13_TargetRawNonAscii", tls(), req("GET", "/caf\xc3\xa9", {kHost}), 400,
               "target_invalid_bytes"});
  v.push_back(
      {"ProxyOriginForm", proxy(), req("GET", "/", {kHost}), 400, "proxy_requires_absolute_form"});
  v.push_back({"ProxyHttpsAbsoluteForm", proxy(), req("GET", "https://api.example.com/", {kHost}),
               400, "scheme_mismatch"});
  v.push_back({"T1_ProxyHostDiffersFromAbsolute", proxy(),
               req("GET", "http://api.example.com/", {{"Host", "evil.example"}}), 403,
               "host_authority_mismatch"});
  v.push_back({"T6_ProxyConnectHostHeaderDiffers", proxy(),
               req("CONNECT", "api.example.com:443", {{"Host", "evil.example:443"}}), 403,
               "host_authority_mismatch"});
  v.push_back({"ProxyConnectWithoutPort", proxy(), req("CONNECT", "api.example.com", {kHost}), 400,
               "connect_port_missing"});
  v.push_back({"ProxyConnectWithBody", proxy(),
               req("CONNECT", "api.example.com:443",
                   {{"Host", "api.example.com:443"}, {"Content-Length", "5"}}),
               400, "connect_with_body"});
  // Methods and versions.
  v.push_back({"MethodNotToken", tls(), req("GE(T", "/", {kHost}), 400, "method_invalid"});
  v.push_back({"T23_TraceReflects", tls(), req("TRACE", "/", {kHost}), 403, "method_refused"});
  v.push_back({"Http2Preface", tls(),
               [] {
                 RequestHead h = req("PRI", "*", {kHost});
                 h.version_major = 2;
                 h.version_minor = 0;
                 return h;
               }(),
               505, "http_version"});
  v.push_back({"Http09", tls(), req("GET", "/", {kHost}, 9), 505, "http_version"});
  // Request smuggling (threat 14).
  v.push_back({"T14_ClAndTe", tls(),
               req("POST", "/", {kHost, {"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}}),
               400, "cl_and_te"});
  v.push_back({"T14_TeAndCl", tls(),
               req("POST", "/", {kHost, {"Transfer-Encoding", "chunked"}, {"Content-Length", "5"}}),
               400, "cl_and_te"});
  v.push_back({"T14_DuplicateClSame", tls(),
               req("POST", "/", {kHost, {"Content-Length", "5"}, {"Content-Length", "5"}}), 400,
               "cl_repeated"});
  v.push_back({"T14_DuplicateClDiffer", tls(),
               req("POST", "/", {kHost, {"Content-Length", "5"}, {"content-length", "6"}}), 400,
               "cl_repeated"});
  for (const char* bad : {"", "abc", "+5", "-5", "5 ", " 5", "0x10", "1,1", "5.0", "1e3"}) {
    v.push_back({"T14_ClNotNumeric", tls(), req("POST", "/", {kHost, {"Content-Length", bad}}), 400,
                 "cl_invalid"});
  }
  v.push_back({"T14_ClHuge", tls(),
               req("POST", "/", {kHost, {"Content-Length", "99999999999999999999999"}}), 413,
               "cl_too_large"});
  v.push_back({"T14_ClOverflowUint64", tls(),
               req("POST", "/", {kHost, {"Content-Length", "18446744073709551616"}}), 413,
               "cl_too_large"});
  v.push_back({"T14_ClAboveConfiguredMax", tls(),
               req("POST", "/", {kHost, {"Content-Length", "9999999999999999"}}), 413,
               "cl_too_large"});
  for (const char* bad :
       {"chunked, identity", " chunked", "chunked ", "xchunked", "\tchunked", "chunked\t",
        "identity", "gzip, chunked", "chunked,", "chun ked", "chunkedx", ""}) {
    v.push_back({"T14_TeObfuscated", tls(), req("POST", "/", {kHost, {"Transfer-Encoding", bad}}),
                 400, "te_not_chunked"});
  }
  v.push_back({"T14_TeRepeated", tls(),
               req("POST", "/",
                   {kHost, {"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}}),
               400, "te_repeated"});
  v.push_back({"T14_TeOnHttp10", tls(),
               req("POST", "/", {kHost, {"Transfer-Encoding", "chunked"}}, 0), 400, "te_http10"});
  v.push_back({"T14_ObsFold", tls(), req("GET", "/", {kHost, {"X-A", "one\r\n two"}}), 400,
               "invalid_header_value"});
  v.push_back({"T14_BareLfInValue", tls(), req("GET", "/", {kHost, {"X-A", "a\nb"}}), 400,
               "invalid_header_value"});
  v.push_back({"T14_BareCrInValue", tls(), req("GET", "/", {kHost, {"X-A", "a\rb"}}), 400,
               "invalid_header_value"});
  v.push_back({"T14_NulInValue", tls(), req("GET", "/", {kHost, {"X-A", std::string("a\0b", 3)}}),
               400, "invalid_header_value"});
  v.push_back({"T14_ControlInValue", tls(), req("GET", "/", {kHost, {"X-A", "a\x01"}}), 400,
               "invalid_header_value"});
  v.push_back({"T14_DelInValue", tls(), req("GET", "/", {kHost, {"X-A", "a\x7f"}}), 400,
               "invalid_header_value"});
  v.push_back({"T14_SpaceBeforeColon", tls(),
               req("POST", "/", {kHost, {"Transfer-Encoding ", "chunked"}}), 400,
               "invalid_header_name"});
  v.push_back({"T14_FoldedLineAsName", tls(), req("GET", "/", {kHost, {" X-A", "b"}}), 400,
               "invalid_header_name"});
  v.push_back({"InvalidNameChars", tls(), req("GET", "/", {kHost, {"X:A", "b"}}), 400,
               "invalid_header_name"});
  v.push_back(
      {"EmptyName", tls(), req("GET", "/", {kHost, {"", "b"}}), 400, "invalid_header_name"});
  v.push_back(
      {"T14_ConnectionDropsContentLength", tls(),
       req("POST", "/", {kHost, {"Content-Length", "5"}, {"Connection", "close, Content-Length"}}),
       400, "connection_lists_protected"});
  v.push_back({"ConnectionDropsHost", tls(), req("GET", "/", {kHost, {"Connection", "host"}}), 400,
               "connection_lists_protected"});
  v.push_back({"ConnectionNotToken", tls(), req("GET", "/", {kHost, {"Connection", "a b"}}), 400,
               "connection_invalid"});
  // Upgrade (threat 16).
  v.push_back({"T16_UpgradeH2c", tls(),
               req("GET", "/",
                   {kHost,
                    {"Connection", "Upgrade, HTTP2-Settings"},
                    {"Upgrade", "h2c"},
                    {"HTTP2-Settings", "AAMAAABkAAQAAP__"}}),
               403, "upgrade_refused"});
  v.push_back({"T16_UpgradeH2cWithoutSettings", tls(),
               req("GET", "/", {kHost, {"Connection", "Upgrade"}, {"Upgrade", "h2c"}}), 403,
               "upgrade_refused"});
  v.push_back({"T16_UpgradeTls", tls(),
               req("GET", "/", {kHost, {"Connection", "Upgrade"}, {"Upgrade", "TLS/1.2"}}), 403,
               "upgrade_refused"});
  v.push_back({"T16_UpgradeList", tls(),
               req("GET", "/", {kHost, {"Connection", "Upgrade"}, {"Upgrade", "websocket, h2c"}}),
               403, "upgrade_refused"});
  v.push_back(
      {"T16_UpgradeTwice", tls(),
       req("GET", "/",
           {kHost, {"Connection", "Upgrade"}, {"Upgrade", "websocket"}, {"Upgrade", "websocket"}}),
       403, "upgrade_refused"});
  v.push_back({"T16_WebsocketOnPost", tls(),
               req("POST", "/", {kHost, {"Connection", "Upgrade"}, {"Upgrade", "websocket"}}), 400,
               "upgrade_malformed"});
  v.push_back({"T16_WebsocketWithoutConnection", tls(),
               req("GET", "/", {kHost, {"Upgrade", "websocket"}}), 400, "upgrade_malformed"});
  v.push_back({"T5_PlainWithoutOriginalDestination", plain(""),
               req("GET", "/", {{"Host", "api.example.com"}}), 403, "no_original_destination"});
  v.push_back({"T22_PlainHttpsAbsoluteForm", plain(),
               req("GET", "https://api.example.com/", {{"Host", "api.example.com"}}), 400,
               "scheme_mismatch"});
  v.push_back({"ProxyConnectChunked", proxy(),
               req("CONNECT", "api.example.com:443",
                   {{"Host", "api.example.com:443"}, {"Transfer-Encoding", "chunked"}}),
               400, "connect_with_body"});
  v.push_back({"ExpectRepeated", tls(),
               req("PUT", "/", {kHost, {"Expect", "100-continue"}, {"Expect", "100-continue"}}),
               417, "expect_unsupported"});
  v.push_back({"ExpectOther", tls(), req("PUT", "/", {kHost, {"Expect", "200-ok"}}), 417,
               "expect_unsupported"});
  // Limits (threat 31).
  v.push_back({"T31_RequestLineTooLong", tls(), req("GET", "/" + std::string(9000, 'a'), {kHost}),
               414, "request_line_too_long"});
  {
    HeaderList many{kHost};
    for (int i = 0; i < 100; ++i) many.push_back({"X-N" + std::to_string(i), "v"});
    v.push_back({"T31_TooManyHeaders", tls(), req("GET", "/", many), 431, "too_many_headers"});
  }
  v.push_back({"T31_HeaderBytes", tls(),
               req("GET", "/", {kHost, {"X-Big", std::string(33 * 1024, 'a')}}), 431,
               "headers_too_large"});
  return v;
}

class RequestRefused : public ::testing::TestWithParam<Case> {};

TEST_P(RequestRefused, IsRefused) {
  const Case& c = GetParam();
  StageLimits limits;
  limits.max_content_length_bytes = 1ull << 40;
  RequestVerdict v = check_request(c.head, c.facts, limits);
  ASSERT_FALSE(v.ok()) << "accepted";
  EXPECT_EQ(v.rejection.status, c.status) << v.rejection.detail;
  EXPECT_EQ(v.rejection.reason, c.reason) << v.rejection.detail;
  EXPECT_FALSE(v.rejection.detail.empty());
}

INSTANTIATE_TEST_SUITE_P(Table, RequestRefused, ::testing::ValuesIn(refused_cases()),
                         [](const auto& info) {
                           return std::string(info.param.name) + "_" + std::to_string(info.index);
                         });

TEST(RequestAccepted, OriginFormInsideTls) {
  RequestVerdict v = check_request(
      req("GET", "/repos/a/b?x=1&y=%2F", {{"Host", "API.Example.COM."}, {"Accept", "*/*"}}), tls());
  ASSERT_TRUE(v.ok()) << v.rejection.reason << ": " << v.rejection.detail;
  const CheckedRequest& r = *v.accepted;
  EXPECT_EQ(r.host, "api.example.com");
  EXPECT_EQ(r.port, 443);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/repos/a/b");
  ASSERT_TRUE(r.query);
  EXPECT_EQ(*r.query, "x=1&y=%2F");  // raw: canonicalization is the policy library's job
  EXPECT_EQ(r.form, TargetForm::kOrigin);
  EXPECT_EQ(r.framing, BodyFraming::kNone);
  EXPECT_TRUE(r.keep_alive);
}

TEST(RequestAccepted, RawPathIsNotNormalisedHere) {
  // Threat 13 is policy's: this stage passes the raw path through untouched.
  RequestVerdict v = check_request(req("GET", "/a/%2e%2e/b/..;x//c", {kHost}), tls());
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.accepted->path, "/a/%2e%2e/b/..;x//c");
}

TEST(RequestAccepted, HostWithMatchingPortAndAbsoluteForm) {
  RequestVerdict v = check_request(
      req("GET", "HTTPS://api.example.com:443", {{"Host", "api.example.com:443"}}), tls());
  ASSERT_TRUE(v.ok()) << v.rejection.reason;
  EXPECT_EQ(v.accepted->path, "/");
  EXPECT_EQ(v.accepted->form, TargetForm::kAbsolute);
  RequestVerdict q = check_request(req("GET", "https://api.example.com?a", {kHost}), tls());
  ASSERT_TRUE(q.ok()) << q.rejection.reason;
  EXPECT_EQ(q.accepted->path, "/");
  EXPECT_EQ(*q.accepted->query, "a");
}

TEST(RequestAccepted, Framing) {
  RequestVerdict cl = check_request(req("POST", "/", {kHost, {"content-length", "0042"}}), tls());
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(cl.accepted->framing, BodyFraming::kContentLength);
  EXPECT_EQ(cl.accepted->content_length, 42u);
  RequestVerdict te =
      check_request(req("POST", "/", {kHost, {"Transfer-Encoding", "CHUNKED"}}), tls());
  ASSERT_TRUE(te.ok());
  EXPECT_EQ(te.accepted->framing, BodyFraming::kChunked);
  RequestVerdict ex = check_request(
      req("PUT", "/", {kHost, {"Content-Length", "10"}, {"Expect", "100-Continue"}}), tls());
  ASSERT_TRUE(ex.ok());
  EXPECT_TRUE(ex.accepted->expect_continue);
}

TEST(RequestAccepted, OptionsAsterisk) {
  RequestVerdict v = check_request(req("OPTIONS", "*", {kHost}), tls());
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.accepted->form, TargetForm::kAsterisk);
  EXPECT_EQ(v.accepted->path, "*");
}

TEST(RequestAccepted, HopByHopStripList) {
  RequestVerdict v = check_request(req("GET", "/",
                                       {kHost,
                                        {"Connection", "keep-alive, X-Secret-Hop ,close"},
                                        {"X-Secret-Hop", "1"},
                                        {"TE", "trailers"},
                                        {"Keep-Alive", "timeout=5"}}),
                                   tls());
  ASSERT_TRUE(v.ok()) << v.rejection.reason;
  const auto& s = v.accepted->strip_headers;
  for (const char* name : {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                           "te", "x-secret-hop", "upgrade"}) {
    EXPECT_NE(std::find(s.begin(), s.end(), name), s.end()) << name;
  }
  EXPECT_FALSE(v.accepted->keep_alive);
}

TEST(RequestAccepted, Http10KeepAlive) {
  RequestVerdict a = check_request(req("GET", "/", {kHost}, 0), tls());
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a.accepted->keep_alive);
  RequestVerdict b =
      check_request(req("GET", "/", {kHost, {"Connection", "Keep-Alive"}}, 0), tls());
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b.accepted->keep_alive);
}

TEST(RequestAccepted, T16_WebsocketUpgrade) {
  RequestVerdict v = check_request(req("GET", "/ws",
                                       {kHost,
                                        {"Connection", "keep-alive, Upgrade"},
                                        {"Upgrade", "WebSocket"},
                                        {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
                                        {"Sec-WebSocket-Version", "13"}}),
                                   tls());
  ASSERT_TRUE(v.ok()) << v.rejection.reason;
  EXPECT_TRUE(v.accepted->websocket_upgrade);
  const auto& s = v.accepted->strip_headers;
  EXPECT_EQ(std::find(s.begin(), s.end(), "upgrade"), s.end());
}

TEST(RequestAccepted, T3_PlainHttpNameIsTheDestination) {
  // Threats 2/3: the dialled IP is not trusted; the Host name is returned for the gateway to
  // resolve itself (and the injector refuses credentials over plain HTTP).
  RequestVerdict v =
      check_request(req("GET", "/x", {{"Host", "api.example.com"}}), plain("203.0.113.66"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.accepted->host, "api.example.com");
  EXPECT_EQ(v.accepted->port, 80);
}

TEST(RequestAccepted, T5_PlainIpHostMatchingTheDialledAddress) {
  RequestVerdict v = check_request(req("GET", "/", {{"Host", "203.0.113.7:80"}}), plain());
  ASSERT_TRUE(v.ok()) << v.rejection.reason;
  EXPECT_EQ(v.accepted->host, "203.0.113.7");
  RequestVerdict v6 =
      check_request(req("GET", "/", {{"Host", "[2001:DB8:0::1]"}}), plain("2001:db8::1"));
  ASSERT_TRUE(v6.ok()) << v6.rejection.reason;
  EXPECT_EQ(v6.accepted->host, "2001:db8::1");
}

TEST(RequestAccepted, ProxyConnectAndAbsoluteForm) {
  RequestVerdict c = check_request(
      req("CONNECT", "API.example.com:443", {{"Host", "api.example.com:443"}}), proxy());
  ASSERT_TRUE(c.ok()) << c.rejection.reason;
  EXPECT_EQ(c.accepted->host, "api.example.com");
  EXPECT_EQ(c.accepted->port, 443);
  EXPECT_EQ(c.accepted->form, TargetForm::kAuthority);
  EXPECT_EQ(c.accepted->path, "");
  RequestVerdict a = check_request(
      req("GET", "http://api.example.com/p?q", {kHost, {"Proxy-Authorization", "Basic eA=="}}),
      proxy());
  ASSERT_TRUE(a.ok()) << a.rejection.reason;
  EXPECT_EQ(a.accepted->port, 80);
  EXPECT_EQ(a.accepted->path, "/p");
  const auto& s = a.accepted->strip_headers;
  EXPECT_NE(std::find(s.begin(), s.end(), "proxy-authorization"), s.end());
}

TEST(RequestAccepted, T15_EveryRequestCheckedAfresh) {
  // The stage is stateless: the second request of a keep-alive connection is judged on its
  // own, so an allowed first request does not carry a fronting second one through.
  ChannelFacts f = tls();
  EXPECT_TRUE(check_request(req("GET", "/", {kHost}), f).ok());
  EXPECT_FALSE(check_request(req("GET", "/", {{"Host", "evil.example"}}), f).ok());
}

TEST(ParseAuthority, Shapes) {
  struct {
    const char* in;
    bool ok;
    const char* host;
    int port;
  } cases[] = {
      {"a.example", true, "a.example", -1},
      {"A.Example.:8080", true, "a.example", 8080},
      {"192.0.2.1:80", true, "192.0.2.1", 80},
      {"[::1]:443", true, "::1", 443},
      {"[2001:DB8::1]", true, "2001:db8::1", -1},
      {"a.example:", false, "", 0},
      {"a.example:0", false, "", 0},
      {"a.example:65536", false, "", 0},
      {"a.example:+80", false, "", 0},
      {"u@a.example", false, "", 0},
      {"[::1", false, "", 0},
      {"[::1]x", false, "", 0},
      {"[fe80::1%25eth0]", false, "", 0},
      {"::1", false, "", 0},
      {"a.example..", false, "", 0},
      {"0x7f.1", false, "", 0},
      {"192.0.2.01", false, "", 0},
      {"", false, "", 0},
      // The host-name grammar of common/host_name.h, shared with policy lint and SNI.
      {"My_Bucket.example:443", true, "my_bucket.example", 443},
      {"-a.example", false, "", 0},
      {"1.2.3.999", false, "", 0},
  };
  for (const auto& c : cases) {
    auto hp = parse_host_port(c.in);
    ASSERT_EQ(hp.has_value(), c.ok) << c.in;
    if (!c.ok) continue;
    EXPECT_EQ(hp->host, c.host) << c.in;
    EXPECT_EQ(hp->port ? int(*hp->port) : -1, c.port) << c.in;
  }
}

TEST(Limits, ConfigurationCannotRaiseHardCeilings) {
  StageLimits huge;
  huge.max_header_count = 1'000'000;
  HeaderList many{kHost};
  for (size_t i = 0; i < kHardMaxHeaderCount + 1; ++i) many.push_back({"X-N", "v"});
  RequestVerdict v = check_request(req("GET", "/", many), tls(), huge);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.rejection.reason, "too_many_headers");
}

}  // namespace
}  // namespace cordon::gateway
