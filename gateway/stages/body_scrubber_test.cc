#include "gateway/stages/body_scrubber.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <random>

#include "gateway/stages/body_relay.h"

namespace cordon::gateway {
namespace {

const std::string kSecret = "ghp_S3cr3t/Value+With=Odd&Chars<1234567890";

std::string b64(std::string_view in, bool url = false) {
  static const char* std_alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static const char* url_alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const char* a = url ? url_alpha : std_alpha;
  std::string out;
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v =
        (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(a[(v >> s) & 63]);
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    out.push_back(a[(v >> 18) & 63]);
    out.push_back(a[(v >> 12) & 63]);
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8);
    out.push_back(a[(v >> 18) & 63]);
    out.push_back(a[(v >> 12) & 63]);
    out.push_back(a[(v >> 6) & 63]);
    out += "=";
  }
  return out;
}

std::string scrub_whole(const std::vector<std::string>& secrets, std::string_view body) {
  BodySecretScrubber s(secrets);
  std::string out;
  s.feed(body, out);
  s.finish(out);
  return out;
}

// The scrubbed output must never contain the secret or any of its encoded forms that carry a
// meaningful share of it: checked by searching for the raw secret and its full encodings.
void expect_clean(const std::string& out, const std::string& secret) {
  EXPECT_EQ(out.find(secret), std::string::npos) << out;
  EXPECT_EQ(out.find(secret.substr(0, secret.size() / 2)), std::string::npos) << out;
}

TEST(BodySecretScrubber, RawSecretIsReplacedBySameLengthRun) {
  std::string body = "{\"headers\":{\"Authorization\":\"Bearer " + kSecret + "\"}}";
  BodySecretScrubber s({kSecret});
  std::string out;
  s.feed(body, out);
  s.finish(out);
  ASSERT_EQ(out.size(), body.size());
  expect_clean(out, kSecret);
  EXPECT_NE(out.find("Bearer " + std::string(kSecret.size(), '*')), std::string::npos) << out;
  EXPECT_EQ(s.matches(), 1u);
  EXPECT_EQ(s.forms(), kScrubRaw);
}

TEST(BodySecretScrubber, Base64AtEveryAlignmentBothAlphabets) {
  for (size_t pre = 0; pre < 6; ++pre) {
    for (bool url : {false, true}) {
      std::string plain = std::string(pre, 'x') + "Basic " + kSecret + " tail";
      std::string enc = b64(plain, url);
      std::string body = "echo=" + enc + ";";
      BodySecretScrubber s({kSecret});
      std::string out;
      s.feed(body, out);
      s.finish(out);
      ASSERT_EQ(out.size(), body.size());
      EXPECT_EQ(out.find(enc), std::string::npos) << "pre=" << pre << " url=" << url;
      // What is left of the encoded secret: at most 3 edge characters on each side.
      size_t stars = std::count(out.begin(), out.end(), '*');
      EXPECT_GE(stars, kSecret.size() * 4 / 3 - 4) << out;
      EXPECT_TRUE(s.forms() & (kScrubBase64 | kScrubBase64Url)) << s.forms();
    }
  }
}

TEST(BodySecretScrubber, PercentJsonAndHexForms) {
  std::string pct_upper, pct_lower, hex;
  for (unsigned char c : kSecret) {
    char buf[8];
    bool keep = std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
    if (keep) {
      pct_upper.push_back(static_cast<char>(c));
      pct_lower.push_back(static_cast<char>(c));
    } else {
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      pct_upper += buf;
      std::snprintf(buf, sizeof buf, "%%%02x", c);
      pct_lower += buf;
    }
    std::snprintf(buf, sizeof buf, "%02x", c);
    hex += buf;
  }
  std::string json_slash = kSecret;
  json_slash.replace(json_slash.find('/'), 1, "\\/");
  std::string json_html = kSecret;
  json_html.replace(json_html.find('&'), 1, "\\u0026");
  json_html.replace(json_html.find('<'), 1, "\\u003c");
  for (const std::string& form : {pct_upper, pct_lower, json_slash, json_html, hex}) {
    std::string body = "a=" + form + "&b=1";
    std::string out = scrub_whole({kSecret}, body);
    ASSERT_EQ(out.size(), body.size());
    EXPECT_EQ(out, "a=" + std::string(form.size(), '*') + "&b=1") << form;
  }
}

TEST(BodySecretScrubber, MatchSplitAtEveryBoundaryIsFound) {
  std::string body = "prefix " + kSecret + " middle " + b64("Bearer " + kSecret) + " end";
  std::string whole = scrub_whole({kSecret}, body);
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    BodySecretScrubber s({kSecret});
    std::string out;
    s.feed(std::string_view(body).substr(0, cut), out);
    EXPECT_LE(s.held(), s.max_hold());
    s.feed(std::string_view(body).substr(cut), out);
    s.finish(out);
    ASSERT_EQ(out, whole) << "cut at " << cut;
  }
  // And one byte at a time.
  BodySecretScrubber s({kSecret});
  std::string out;
  for (char c : body) {
    s.feed(std::string_view(&c, 1), out);
    ASSERT_LE(s.held(), s.max_hold());
  }
  s.finish(out);
  EXPECT_EQ(out, whole);
  expect_clean(out, kSecret);
}

TEST(BodySecretScrubber, HoldsBackOnlyWhatCouldStartAMatch) {
  BodySecretScrubber s({kSecret});
  std::string out;
  s.feed("data: event one\n\n", out);
  EXPECT_EQ(out, "data: event one\n\n");  // nothing held: a streamed event is not delayed
  EXPECT_EQ(s.held(), 0u);
  s.feed("x ghp_S3c", out);
  EXPECT_EQ(s.held(), 7u);
  EXPECT_EQ(out, "data: event one\n\nx ");
  s.feed("ond", out);  // not the secret after all
  s.finish(out);
  EXPECT_EQ(out, "data: event one\n\nx ghp_S3cond");
}

TEST(BodySecretScrubber, OverlappingAndRepeatedMatches) {
  std::string secret = "abcdabcd";
  std::string body = "abcdabcdabcd|abcdabcd";
  std::string out = scrub_whole({secret}, body);
  EXPECT_EQ(out, "************|********");
}

TEST(BodySecretScrubber, SeveralSecretsAndLongestMatchWins) {
  std::string rendered = "Bearer " + kSecret;
  std::string other = "sk-live-0123456789abcdef";
  std::string body = "h1=" + rendered + " h2=" + other;
  std::string out = scrub_whole({kSecret, rendered, other}, body);
  EXPECT_EQ(out,
            "h1=" + std::string(rendered.size(), '*') + " h2=" + std::string(other.size(), '*'));
}

TEST(BodySecretScrubber, ShortAndOversizedSecretsAreIgnoredAndTextIsUntouched) {
  BodySecretScrubber none({"", "ab", std::string(kMaxScrubSecretBytes + 1, 'z')});
  EXPECT_FALSE(none.active());
  std::string out;
  none.feed("ab zzz", out);
  none.finish(out);
  EXPECT_EQ(out, "ab zzz");
  // Near misses are not touched.
  std::string near = kSecret.substr(0, kSecret.size() - 1) + "#";
  EXPECT_EQ(scrub_whole({kSecret}, near), near);
}

TEST(BodySecretScrubber, RandomBodiesWithEmbeddedSecretsAnySplit) {
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::string body;
    size_t n = rng() % 3000;
    for (size_t i = 0; i < n; ++i) body.push_back(static_cast<char>(rng() & 0xff));
    size_t at = body.empty() ? 0 : rng() % body.size();
    body.insert(at, rng() % 2 ? kSecret : b64("k=" + kSecret));
    BodySecretScrubber s({kSecret});
    std::string out;
    size_t pos = 0;
    while (pos < body.size()) {
      size_t step = 1 + rng() % 700;
      s.feed(std::string_view(body).substr(pos, step), out);
      pos += std::min(step, body.size() - pos);
    }
    s.finish(out);
    ASSERT_EQ(out.size(), body.size());
    ASSERT_EQ(out.find(kSecret), std::string::npos);
    ASSERT_EQ(out.find(b64("k=" + kSecret)), std::string::npos);
    EXPECT_GE(s.matches(), 1u);
  }
}

// ---- ScrubbingBodyRelay --------------------------------------------------------------------

std::string compress(std::string_view plain, int window_bits) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, plain.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  zs.avail_in = static_cast<uInt>(plain.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// De-chunks what the relay framed (a strict little reader for the tests).
std::string dechunk(std::string_view framed, HeaderList* trailers = nullptr) {
  std::string body;
  while (true) {
    size_t eol = framed.find("\r\n");
    EXPECT_NE(eol, std::string_view::npos);
    size_t len = std::stoul(std::string(framed.substr(0, eol)), nullptr, 16);
    framed.remove_prefix(eol + 2);
    if (len == 0) break;
    body.append(framed.substr(0, len));
    EXPECT_EQ(framed.substr(len, 2), "\r\n");
    framed.remove_prefix(len + 2);
  }
  while (!framed.starts_with("\r\n")) {
    size_t eol = framed.find("\r\n");
    std::string line(framed.substr(0, eol));
    size_t colon = line.find(": ");
    if (trailers) trailers->push_back({line.substr(0, colon), line.substr(colon + 2)});
    framed.remove_prefix(eol + 2);
  }
  EXPECT_EQ(framed, "\r\n");
  return body;
}

TEST(BodyCodingTest, FromContentEncoding) {
  EXPECT_EQ(body_coding({}), BodyCoding::kIdentity);
  EXPECT_EQ(body_coding({{"Content-Encoding", "identity"}}), BodyCoding::kIdentity);
  EXPECT_EQ(body_coding({{"content-encoding", " GZIP "}}), BodyCoding::kGzip);
  EXPECT_EQ(body_coding({{"Content-Encoding", "x-gzip"}}), BodyCoding::kGzip);
  EXPECT_EQ(body_coding({{"Content-Encoding", "deflate"}}), BodyCoding::kDeflate);
  EXPECT_EQ(body_coding({{"Content-Encoding", "br"}}), BodyCoding::kUnsupported);
  EXPECT_EQ(body_coding({{"Content-Encoding", "gzip, gzip"}}), BodyCoding::kUnsupported);
  EXPECT_EQ(body_coding({{"Content-Encoding", "gzip"}, {"Content-Encoding", "br"}}),
            BodyCoding::kUnsupported);
}

TEST(ScrubbingBodyRelayTest, IdentityContentLengthKeepsLength) {
  ScrubbingBodyRelay r({kSecret}, BodyCoding::kIdentity, false);
  std::string body = "echo " + kSecret + " done";
  std::string out;
  r.feed(body.substr(0, 10), out);
  r.feed(body.substr(10), out);
  ASSERT_TRUE(r.finish({}, {}, {kSecret}, out));
  EXPECT_EQ(out.size(), body.size());
  EXPECT_EQ(out.find(kSecret), std::string::npos);
  EXPECT_EQ(r.matches(), 1u);
}

TEST(ScrubbingBodyRelayTest, ChunkedIsRechunkedAndTrailersFiltered) {
  ScrubbingBodyRelay r({kSecret}, BodyCoding::kIdentity, true);
  std::string body = "echo " + kSecret + " done";
  std::string out;
  for (size_t i = 0; i < body.size(); i += 5) r.feed(body.substr(i, 5), out);
  HeaderList trailers = {{"X-Checksum", "abc"},
                         {"X-Echo", "Bearer " + kSecret},
                         {"Authorization", "x"},
                         {"X-Api-Key", "k"}};
  ASSERT_TRUE(r.finish(trailers, {"x-api-key"}, {kSecret}, out));
  HeaderList got;
  std::string plain = dechunk(out, &got);
  EXPECT_EQ(plain, "echo " + std::string(kSecret.size(), '*') + " done");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "X-Checksum");
}

TEST(ScrubbingBodyRelayTest, GzipAndDeflateAreDecodedAndScrubbed) {
  std::string plain;
  for (int i = 0; i < 2000; ++i) plain += "line " + std::to_string(i) + " auth=" + kSecret + "\n";
  for (auto [coding, bits] :
       {std::pair{BodyCoding::kGzip, 15 + 16}, std::pair{BodyCoding::kDeflate, 15},
        std::pair{BodyCoding::kDeflate, -15}}) {
    std::string z = compress(plain, bits);
    ScrubbingBodyRelay r({kSecret}, coding, true);
    EXPECT_TRUE(r.decoded_head_changes());
    std::string out;
    for (size_t i = 0; i < z.size(); i += 1000) {
      r.feed(std::string_view(z).substr(i, 1000), out);
      while (r.drain(out, 4096)) {
      }
      ASSERT_FALSE(r.failed()) << r.error() << " bits=" << bits;
    }
    ASSERT_TRUE(r.finish({}, {}, {kSecret}, out)) << r.error();
    std::string got = dechunk(out);
    EXPECT_EQ(got.size(), plain.size());
    EXPECT_EQ(got.find(kSecret), std::string::npos);
    EXPECT_EQ(r.matches(), 2000u);
    EXPECT_EQ(r.decoded_bytes(), plain.size());
  }
}

TEST(ScrubbingBodyRelayTest, DecompressionBombIsDrainedInBoundedSteps) {
  std::string plain(32 << 20, 'a');
  std::string z = compress(plain, 15 + 16);
  ASSERT_LT(z.size(), 64u * 1024);
  ScrubbingBodyRelay r({kSecret}, BodyCoding::kGzip, true);
  std::string out;
  r.feed(z, out);
  size_t biggest = 0, total = 0;
  bool more = true;
  while (more) {
    more = r.drain(out, 64 * 1024);
    biggest = std::max(biggest, out.size());
    total += out.size();
    out.clear();
  }
  ASSERT_TRUE(r.finish({}, {}, {kSecret}, out)) << r.error();
  EXPECT_LT(biggest, 200u * 1024);  // one step's output (plus chunk framing), never the whole
  EXPECT_GT(total, plain.size());
}

TEST(ScrubbingBodyRelayTest, BrokenAndTruncatedCompressedBodiesFail) {
  std::string z = compress("hello " + kSecret, 15 + 16);
  {
    ScrubbingBodyRelay r({kSecret}, BodyCoding::kGzip, false);
    std::string out;
    r.feed(z.substr(0, z.size() / 2), out);
    while (r.drain(out, 4096)) {
    }
    EXPECT_FALSE(r.finish({}, {}, {kSecret}, out));
    EXPECT_EQ(r.error(), "compressed_body_truncated");
  }
  {
    ScrubbingBodyRelay r({kSecret}, BodyCoding::kGzip, false);
    std::string out;
    r.feed("this is not gzip at all", out);
    while (r.drain(out, 4096)) {
    }
    EXPECT_TRUE(r.failed());
    EXPECT_EQ(r.error(), "compressed_body_invalid");
  }
  {
    ScrubbingBodyRelay r({kSecret}, BodyCoding::kUnsupported, false);
    EXPECT_TRUE(r.failed());
    EXPECT_EQ(r.error(), "unscannable_content_encoding");
  }
}

TEST(ScrubPatternCache, BuildsOncePerSecretSetAndScrubsAsAFreshScrubber) {
  ScrubPatternCache cache;
  const std::vector<std::string> one = {"ghp_secretvalue1234"};
  auto a = cache.get(one);
  EXPECT_EQ(cache.get(one), a) << "same secrets: the patterns are shared, not rebuilt";
  auto b = cache.get({"ghp_secretvalue1234", "sk-other-secret-99"});
  EXPECT_NE(b, a) << "a new secret: rebuilt";
  EXPECT_GT(b->size(), a->size());
  // Two scrubbers over the shared patterns keep their own stream state.
  const std::string body = "x ghp_secretvalue1234 y sk-other-secret-99 z";
  BodySecretScrubber fresh({"ghp_secretvalue1234", "sk-other-secret-99"});
  BodySecretScrubber s1(b), s2(b);
  std::string want, got1, got2;
  fresh.feed(body, want);
  fresh.finish(want);
  s1.feed(body.substr(0, 10), got1);
  s2.feed(body, got2);
  s1.feed(body.substr(10), got1);
  s1.finish(got1);
  s2.finish(got2);
  EXPECT_EQ(got1, want);
  EXPECT_EQ(got2, want);
  EXPECT_EQ(want.find("secret"), std::string::npos) << want;
  EXPECT_EQ(s1.matches(), 2u);
  EXPECT_FALSE(BodySecretScrubber(std::shared_ptr<const ScrubPatterns>()).active());
}

}  // namespace
}  // namespace cordon::gateway
