// ClientHello parser tests. Real hellos come from OpenSSL in-process (testing/); malformed ones
// are built by editing those bytes. Threat numbers refer to specs/egress-threats.md.
#include "gateway/stages/client_hello.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <cstring>
#include <memory>

#include "gateway/stages/limits.h"
#include "gateway/stages/testing/client_hello_samples.h"

namespace cordon::gateway {
namespace {

using testing::HelloOptions;
using testing::make_client_hello;
using testing::split_into_records;

std::string hello_with(std::string sni, std::vector<std::string> alpn = {}, int max_version = 0) {
  return make_client_hello(HelloOptions{std::move(sni), std::move(alpn), max_version});
}

// Offsets inside a single-record hello: the handshake message starts at 5, its body at 9.
size_t find_extension(const std::string& wire, uint16_t type) {
  size_t p = 9 + 2 + 32;
  p += 1 + uint8_t(wire[p]);
  p += 2 + ((size_t(uint8_t(wire[p])) << 8) | uint8_t(wire[p + 1]));
  p += 1 + uint8_t(wire[p]);
  p += 2;  // extensions length
  while (p + 4 <= wire.size()) {
    uint16_t t = uint16_t((uint8_t(wire[p]) << 8) | uint8_t(wire[p + 1]));
    size_t len = (size_t(uint8_t(wire[p + 2])) << 8) | uint8_t(wire[p + 3]);
    if (t == type) return p;
    p += 4 + len;
  }
  return std::string::npos;
}

// Rewrites the three length fields (record, handshake, extensions) after `delta` bytes were
// added to (or removed from) the extensions block of a single-record hello.
void adjust_lengths(std::string& wire, int delta) {
  auto put16 = [&](size_t at, int add) {
    int v = (uint8_t(wire[at]) << 8) | uint8_t(wire[at + 1]);
    v += add;
    wire[at] = char(v >> 8);
    wire[at + 1] = char(v & 0xff);
  };
  put16(3, delta);
  int hs = (uint8_t(wire[6]) << 16) | (uint8_t(wire[7]) << 8) | uint8_t(wire[8]);
  hs += delta;
  wire[6] = char(hs >> 16);
  wire[7] = char((hs >> 8) & 0xff);
  wire[8] = char(hs & 0xff);
  size_t p = 9 + 2 + 32;
  p += 1 + uint8_t(wire[p]);
  p += 2 + ((size_t(uint8_t(wire[p])) << 8) | uint8_t(wire[p + 1]));
  p += 1 + uint8_t(wire[p]);
  put16(p, delta);
}

// Replaces the SNI extension's data with `ext_data` (fixing every length).
std::string with_sni_extension(const std::string& base, const std::string& ext_data) {
  std::string wire = base;
  size_t p = find_extension(wire, 0);
  EXPECT_NE(p, std::string::npos);
  size_t old_len = (size_t(uint8_t(wire[p + 2])) << 8) | uint8_t(wire[p + 3]);
  wire.replace(p + 4, old_len, ext_data);
  wire[p + 2] = char(ext_data.size() >> 8);
  wire[p + 3] = char(ext_data.size() & 0xff);
  adjust_lengths(wire, int(ext_data.size()) - int(old_len));
  return wire;
}

std::string sni_entry(uint8_t type, std::string_view name) {
  std::string e;
  e += char(type);
  e += char(name.size() >> 8);
  e += char(name.size() & 0xff);
  e.append(name);
  return e;
}

std::string sni_list(std::string entries) {
  std::string l;
  l += char(entries.size() >> 8);
  l += char(entries.size() & 0xff);
  return l + entries;
}

// Appends one extension at the end of the extensions block.
std::string with_extra_extension(const std::string& base, uint16_t type, std::string data) {
  std::string wire = base;
  std::string ext;
  ext += char(type >> 8);
  ext += char(type & 0xff);
  ext += char(data.size() >> 8);
  ext += char(data.size() & 0xff);
  ext += data;
  wire += ext;
  adjust_lengths(wire, int(ext.size()));
  return wire;
}

TEST(ClientHello, RealHelloWithSniAndAlpn) {
  std::string wire = hello_with("API.Example.com", {"h2", "http/1.1"});
  HelloParse r = parse_client_hello(wire);
  ASSERT_EQ(r.status, HelloStatus::kDone) << r.error;
  ASSERT_TRUE(r.hello.sni.has_value());
  EXPECT_EQ(*r.hello.sni, "api.example.com");  // lower-cased
  EXPECT_EQ(r.hello.alpn, (std::vector<std::string>{"h2", "http/1.1"}));
  EXPECT_EQ(r.hello.legacy_version, 0x0303);
  EXPECT_NE(std::find(r.hello.supported_versions.begin(), r.hello.supported_versions.end(), 0x0304),
            r.hello.supported_versions.end());
  EXPECT_EQ(r.hello.wire_bytes, wire.size());
  EXPECT_EQ(r.hello.record_count, 1u);
  EXPECT_TRUE(r.looks_like_tls());
}

// '_' is a label byte in the one host-name grammar (common/host_name.h) that policy lint
// uses: a destination listing such a name must be reachable by its SNI.
TEST(ClientHello, SniWithUnderscoreIsAccepted) {
  const std::string base = hello_with("a.example");
  HelloParse r =
      parse_client_hello(with_sni_extension(base, sni_list(sni_entry(0, "My_Bucket.example"))));
  ASSERT_EQ(r.status, HelloStatus::kDone) << r.error;
  ASSERT_TRUE(r.hello.sni.has_value());
  EXPECT_EQ(*r.hello.sni, "my_bucket.example");
}

// Threat 9: no SNI (the client dialled an IP literal) is reported as absent, not an error;
// the gateway refuses it.
TEST(ClientHello, Threat9_NoSniIsAbsent) {
  HelloParse r = parse_client_hello(hello_with(""));
  ASSERT_EQ(r.status, HelloStatus::kDone) << r.error;
  EXPECT_FALSE(r.hello.sni.has_value());
  EXPECT_TRUE(r.hello.alpn.empty());
}

TEST(ClientHello, Tls12OnlyHello) {
  HelloParse r = parse_client_hello(hello_with("example.org", {"http/1.1"}, TLS1_2_VERSION));
  ASSERT_EQ(r.status, HelloStatus::kDone) << r.error;
  EXPECT_EQ(*r.hello.sni, "example.org");
  EXPECT_TRUE(r.hello.supported_versions.empty());
}

// Threat 9: a hello split across TCP segments at every byte offset: every prefix says NeedMore,
// the whole says Done with the same result.
TEST(ClientHello, Threat9_SplitAtEveryByteOffset) {
  std::string wire = hello_with("api.example.com", {"h2", "http/1.1"});
  for (size_t cut = 0; cut < wire.size(); ++cut) {
    HelloParse r = parse_client_hello(std::string_view(wire).substr(0, cut));
    ASSERT_EQ(r.status, HelloStatus::kNeedMore) << "prefix " << cut << ": " << r.error;
  }
  HelloParse whole = parse_client_hello(wire);
  ASSERT_EQ(whole.status, HelloStatus::kDone);
}

// Threat 9: the handshake message spread over several TLS records, at several fragment sizes,
// each also delivered byte by byte.
TEST(ClientHello, Threat9_SplitAcrossRecords) {
  std::string wire = hello_with("api.example.com", {"http/1.1"});
  for (size_t size : {1u, 2u, 3u, 4u, 5u, 7u, 40u, 100u, 255u, 256u, 1000u}) {
    std::string split = split_into_records(wire, {size});
    HelloParse r = parse_client_hello(split);
    ASSERT_EQ(r.status, HelloStatus::kDone) << "fragment " << size << ": " << r.error;
    EXPECT_EQ(*r.hello.sni, "api.example.com");
    EXPECT_EQ(r.hello.alpn, std::vector<std::string>{"http/1.1"});
    EXPECT_EQ(r.hello.wire_bytes, split.size());
    EXPECT_GT(r.hello.record_count, size < 200 ? 1u : 0u);
    if (size == 3 || size == 100) {
      for (size_t cut = 0; cut < split.size(); ++cut) {
        HelloParse p = parse_client_hello(std::string_view(split).substr(0, cut));
        ASSERT_EQ(p.status, HelloStatus::kNeedMore) << size << "/" << cut << ": " << p.error;
      }
    }
  }
  // Uneven fragments: 1 byte (part of the handshake header), then 3, then the rest.
  HelloParse r = parse_client_hello(split_into_records(wire, {1, 3, 60, 4096}));
  ASSERT_EQ(r.status, HelloStatus::kDone) << r.error;
  EXPECT_EQ(r.hello.record_count, 4u);
}

TEST(ClientHello, BytesAfterTheHelloRecordsAreIgnored) {
  std::string wire = hello_with("a.example");
  std::string extra = wire + std::string("\x17\x03\x03\x00\x02hi", 7);
  HelloParse r = parse_client_hello(extra);
  ASSERT_EQ(r.status, HelloStatus::kDone) << r.error;
  EXPECT_EQ(r.hello.wire_bytes, wire.size());
}

struct BadCase {
  const char* name;
  std::string bytes;
  HelloStatus expect;
  const char* error_contains;
};

class ClientHelloBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(ClientHelloBad, Refused) {
  const BadCase& c = GetParam();
  HelloParse r = parse_client_hello(c.bytes);
  EXPECT_EQ(r.status, c.expect) << to_string(r.status) << ": " << r.error;
  EXPECT_NE(r.error.find(c.error_contains), std::string::npos) << r.error;
}

std::vector<BadCase> bad_cases() {
  std::string base = hello_with("api.example.com", {"http/1.1"});
  std::vector<BadCase> v;
  v.push_back({"PlainHttpOn443", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", HelloStatus::kNotTls,
               "not a TLS handshake"});
  v.push_back({"Sslv2Hello", std::string("\x80\x2e\x01\x00\x02", 5), HelloStatus::kError, "SSLv2"});
  v.push_back({"AlertFirst", std::string("\x15\x03\x01\x00\x02\x02\x28", 7), HelloStatus::kError,
               "content type 21"});
  {
    std::string b = base;
    b[1] = 0x02;
    v.push_back({"RecordMajorVersion2", b, HelloStatus::kError, "record version"});
  }
  {
    std::string b = base.substr(0, 2);
    b[1] = 0x07;
    v.push_back({"RecordMajorVersionEarly", b, HelloStatus::kError, "major byte"});
  }
  {
    std::string b = base;
    b[2] = 0x00;  // SSL 3.0
    v.push_back({"RecordVersionSsl3", b, HelloStatus::kError, "record version 0x0300"});
  }
  {
    std::string b = base;
    b[2] = 0x09;
    v.push_back({"RecordVersionFuture", b, HelloStatus::kError, "record version 0x0309"});
  }
  {
    std::string b = split_into_records(base, {50});
    size_t second = 5 + 50;
    b[second + 2] = char(b[2] == 0x01 ? 0x03 : 0x01);
    v.push_back({"RecordVersionChanges", b, HelloStatus::kError, "differs from the first"});
  }
  {
    std::string b = split_into_records(base, {50});
    b[5 + 50] = 0x17;  // application data record in the middle of the hello
    v.push_back({"NonHandshakeRecordInside", b, HelloStatus::kError, "content type 23"});
  }
  v.push_back({"ZeroLengthRecord", std::string("\x16\x03\x01\x00\x00", 5) + base,
               HelloStatus::kError, "zero-length"});
  {
    std::string b = base;
    b[3] = 0x40;  // 16384 + ...
    b[4] = 0x01;
    v.push_back({"RecordTooLong", b, HelloStatus::kError, "exceeds 2^14"});
  }
  {
    std::string b = base;
    b[5] = 0x02;  // ServerHello
    v.push_back({"NotClientHello", b, HelloStatus::kError, "not ClientHello"});
  }
  {
    // Declared handshake length far beyond the cap: refused at once, no waiting.
    std::string b = base.substr(0, 9);
    b[6] = 0x01;
    v.push_back({"HandshakeOverCap", b, HelloStatus::kError, "exceeds the cap"});
  }
  {
    std::string b = base;
    b[9] = 0x03;
    b[10] = 0x00;
    v.push_back({"LegacyVersionSsl3", b, HelloStatus::kError, "legacy_version 0x0300"});
  }
  {
    // A second handshake message after the ClientHello inside the same record.
    std::string b = base + std::string("\x14\x00\x00\x00", 4);
    b[3] = char(((uint8_t(b[3]) << 8 | uint8_t(b[4])) + 4) >> 8);
    b[4] = char(((uint8_t(base[3]) << 8 | uint8_t(base[4])) + 4) & 0xff);
    v.push_back({"TrailingBytesInRecord", b, HelloStatus::kError, "after the ClientHello"});
  }
  {
    // Extra bytes after the extensions block, inside the handshake message.
    std::string b = base + "zz";
    int rec = (uint8_t(b[3]) << 8 | uint8_t(b[4])) + 2;
    b[3] = char(rec >> 8);
    b[4] = char(rec & 0xff);
    int hs = (uint8_t(b[7]) << 8 | uint8_t(b[8])) + 2;
    b[7] = char(hs >> 8);
    b[8] = char(hs & 0xff);
    v.push_back({"TrailingGarbageInHello", b, HelloStatus::kError, "trailing garbage"});
  }
  v.push_back({"DuplicateExtension",
               with_extra_extension(base, 16, std::string("\x00\x03\x02h2", 5)),
               HelloStatus::kError, "duplicate extension 0x0010"});
  v.push_back({"DuplicateSniExtension",
               with_extra_extension(base, 0, sni_list(sni_entry(0, "evil.example"))),
               HelloStatus::kError, "duplicate extension 0x0000"});
  v.push_back({"SniTwoHostNames",
               with_sni_extension(
                   base, sni_list(sni_entry(0, "api.example.com") + sni_entry(0, "evil.example"))),
               HelloStatus::kError, "more than one host_name"});
  v.push_back({"SniZeroLengthName", with_sni_extension(base, sni_list(sni_entry(0, ""))),
               HelloStatus::kError, "empty"});
  v.push_back({"SniEmptyList", with_sni_extension(base, sni_list("")), HelloStatus::kError,
               "list is empty"});
  v.push_back(
      {"SniEmptyExtension", with_sni_extension(base, ""), HelloStatus::kError, "server_name"});
  v.push_back({"SniNonHostNameType",
               with_sni_extension(base, sni_list(sni_entry(1, "api.example.com"))),
               HelloStatus::kError, "type 1"});
  v.push_back({"SniListLengthMismatch",
               with_sni_extension(base, std::string("\x00\x20", 2) + sni_entry(0, "a.example")),
               HelloStatus::kError, "list length"});
  v.push_back({"SniEntryTruncated",
               with_sni_extension(base, sni_list(std::string("\x00\x00\x20", 3) + "a.example")),
               HelloStatus::kError, "truncated"});
  for (const char* bad : {"api.example.com.", "1.2.3.4", "-a.example", "a..example",
                          "a.example\x01", "caf\xc3\xa9.example"}) {
    v.push_back({"SniInvalidName", with_sni_extension(base, sni_list(sni_entry(0, bad))),
                 HelloStatus::kError, "not a valid DNS host name"});
  }
  v.push_back({"SniLabelTooLong",
               with_sni_extension(base, sni_list(sni_entry(0, std::string(64, 'a') + ".example"))),
               HelloStatus::kError, "not a valid DNS host name"});
  v.push_back({"AlpnEmptyProtocol",
               with_extra_extension(hello_with("a.example"), 16, std::string("\x00\x01\x00", 3)),
               HelloStatus::kError, "ALPN protocol name is empty"});
  v.push_back({"AlpnListMismatch",
               with_extra_extension(hello_with("a.example"), 16, std::string("\x00\x09\x02h2", 5)),
               HelloStatus::kError, "ALPN protocol list"});
  {
    // An extension whose length runs past the end of the extensions block.
    std::string b = base + std::string("\x12\x34\x00\x0a", 4) + "ab";
    adjust_lengths(b, 6);
    v.push_back({"ExtensionTruncated", b, HelloStatus::kError, "truncated"});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, ClientHelloBad, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) {
                           return std::string(info.param.name) + "_" + std::to_string(info.index);
                         });

TEST(ClientHello, PreSharedKeyMustBeLast) {
  std::string base = hello_with("a.example");
  std::string wire = with_extra_extension(with_extra_extension(base, 41, "x"), 0x3377, "");
  HelloParse r = parse_client_hello(wire);
  EXPECT_EQ(r.status, HelloStatus::kError);
  EXPECT_NE(r.error.find("pre_shared_key"), std::string::npos) << r.error;
}

// The cap: a hello whose records keep coming beyond kMaxClientHelloBytes is refused, and a
// buffer at the cap never yields NeedMore.
TEST(ClientHello, SizeCapOnTheWire) {
  std::string wire = hello_with("a.example");
  // Pad with an unknown extension so that the hello is just above the cap in 1000-byte records.
  std::string big = with_extra_extension(wire, 0x7777, std::string(16100, 'p'));
  std::string split = split_into_records(big, {1000});
  ASSERT_GT(split.size(), kMaxClientHelloBytes);
  HelloParse r = parse_client_hello(std::string_view(split).substr(0, kMaxClientHelloBytes));
  EXPECT_EQ(r.status, HelloStatus::kError) << r.error;
  // A 15 KiB hello in one record fits and parses.
  std::string padded = with_extra_extension(wire, 0x7777, std::string(15000, 'p'));
  HelloParse ok = parse_client_hello(padded);
  EXPECT_EQ(ok.status, HelloStatus::kDone) << ok.error;
  // Tiny records: overhead pushes the wire size over the cap even though the message fits.
  std::string tiny =
      split_into_records(with_extra_extension(wire, 0x7777, std::string(8000, 'p')), {4});
  ASSERT_GT(tiny.size(), kMaxClientHelloBytes);
  HelloParse t = parse_client_hello(tiny);
  EXPECT_EQ(t.status, HelloStatus::kError);
  EXPECT_NE(t.error.find("exceeds"), std::string::npos) << t.error;
}

TEST(ClientHello, NeverReadsBeyondTheSpan) {
  // Every truncation of every sample: the parser only answers NeedMore or an error, and ASan
  // (sanitizer build) catches any read past the span, which is a heap copy of exact size.
  for (const auto& opts : {HelloOptions{"x.example", {"h2"}, 0}, HelloOptions{"", {}, 0}}) {
    std::string wire = make_client_hello(opts);
    for (size_t cut = 0; cut <= wire.size(); ++cut) {
      auto copy = std::make_unique<char[]>(cut + 1);
      std::memcpy(copy.get(), wire.data(), cut);
      HelloParse r = parse_client_hello(std::string_view(copy.get(), cut));
      EXPECT_NE(r.status, HelloStatus::kNotTls);
    }
  }
}

}  // namespace
}  // namespace cordon::gateway
