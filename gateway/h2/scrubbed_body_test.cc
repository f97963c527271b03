#include "gateway/h2/scrubbed_body.h"

#include <gtest/gtest.h>

#include "gateway/h2/testing/compress.h"

namespace cordon::gateway::h2 {
namespace {

using testing::compress;

constexpr const char* kSecret = "ghp_SCRUBBED_BODY_SECRET_0123456789";

std::shared_ptr<const ScrubPatterns> patterns() {
  return std::make_shared<const ScrubPatterns>(std::vector<std::string>{kSecret});
}

bool has(const HeaderList& headers, std::string_view name) {
  for (const auto& h : headers)
    if (ascii_iequals(h.name, name)) return true;
  return false;
}

// A body with the secret many times over, one of them at the very end.
std::string echo_body() {
  std::string plain;
  for (int i = 0; i < 2000; ++i)
    plain += "{\"authorization\":\"Bearer " + std::string(kSecret) + "\"}\n";
  return plain + kSecret;
}

std::string blanked(std::string plain) {
  const std::string s = kSecret;
  for (size_t p = plain.find(s); p != std::string::npos; p = plain.find(s, p))
    plain.replace(p, s.size(), std::string(s.size(), '*'));
  return plain;
}

// Feeds `raw` in pieces of `piece` bytes and drains each in steps of `budget`, as the stream
// loops do (one step per client room); counts the steps that left input for another.
std::string run(ScrubbedBody& b, const std::string& raw, size_t piece, size_t budget,
                int* more_steps = nullptr) {
  std::string out;
  for (size_t i = 0; i < raw.size(); i += piece) {
    b.feed(std::string_view(raw).substr(i, piece), out);
    while (b.drain(out, budget))
      if (more_steps) ++*more_steps;
  }
  EXPECT_TRUE(b.finish(out)) << b.error();
  return out;
}

TEST(H2ScrubbedBody, GzipAndDeflateBodiesAreDecodedScrubbedAndSentDecoded) {
  const std::string plain = echo_body();
  for (int window_bits : {15 + 16, 15, -15}) {
    const std::string coding = window_bits == 15 + 16 ? "gzip" : "deflate";
    const std::string z = compress(plain, window_bits);
    HeaderList headers = {{"Content-Type", "application/json"},
                          {"Content-Encoding", coding},
                          {"Content-Length", std::to_string(z.size())}};
    ScrubbedBody b(patterns(), headers);
    ASSERT_FALSE(b.failed()) << coding;
    EXPECT_TRUE(b.decoded());
    // Sent decoded: neither the coding nor the compressed length stays true.
    EXPECT_FALSE(has(headers, "content-encoding")) << coding;
    EXPECT_FALSE(has(headers, "content-length")) << coding;
    EXPECT_TRUE(has(headers, "content-type"));
    int more_steps = 0;
    std::string out = run(b, z, 1000, 4096, &more_steps);
    EXPECT_EQ(out.find(kSecret), std::string::npos) << coding;
    EXPECT_TRUE(out == blanked(plain)) << coding;
    EXPECT_EQ(b.matches(), 2001u) << coding;
    EXPECT_EQ(b.decoded_bytes(), plain.size());
    // Decoded in bounded steps, not all at once.
    EXPECT_GT(more_steps, 1) << coding;
    EXPECT_EQ(b.pending_input(), 0u);
    std::vector<std::pair<std::string, uint64_t>> counts;
    b.add_counts(counts);
    EXPECT_EQ(counts, (std::vector<std::pair<std::string, uint64_t>>{
                          {"body_secrets_scrubbed", 2001}, {"body_bytes_decoded", plain.size()}}));
  }
}

TEST(H2ScrubbedBody, CodingsThatCannotBeCheckedAreRefusedAsOnHttp1) {
  for (std::string coding : {"br", "zstd", "gzip, br", "gzip, gzip", "compress"}) {
    HeaderList headers = {{"Content-Encoding", coding}, {"Content-Length", "10"}};
    const HeaderList before = headers;
    ScrubbedBody b(patterns(), headers);
    EXPECT_TRUE(b.failed()) << coding;
    // The word the HTTP/1.1 relay audits (ResponseRelay, "unscannable_content_encoding").
    EXPECT_EQ(b.error(), "unscannable_content_encoding") << coding;
    EXPECT_EQ(headers, before);
    std::string out;
    b.feed(std::string("ghp_") + kSecret, out);
    EXPECT_TRUE(out.empty());
    EXPECT_FALSE(b.finish(out));
    EXPECT_TRUE(out.empty());
  }
}

TEST(H2ScrubbedBody, BrokenCompressedBodiesFail) {
  const std::string z = compress(echo_body(), 15 + 16);
  {
    HeaderList headers = {{"Content-Encoding", "gzip"}};
    ScrubbedBody b(patterns(), headers);
    std::string out;
    b.feed(std::string_view(z).substr(0, z.size() / 2), out);
    while (b.drain(out, 4096)) {
    }
    EXPECT_FALSE(b.finish(out));
    EXPECT_EQ(b.error(), "compressed_body_truncated");
    EXPECT_EQ(out.find(kSecret), std::string::npos);
  }
  {
    HeaderList headers = {{"Content-Encoding", "gzip"}};
    ScrubbedBody b(patterns(), headers);
    std::string out;
    b.feed("this is not gzip at all", out);
    EXPECT_FALSE(b.drain(out, 4096));
    EXPECT_TRUE(b.failed());
    EXPECT_EQ(b.error(), "compressed_body_invalid");
  }
}

std::string grpc_message(const std::string& payload) {
  std::string m(5, '\0');
  uint32_t n = static_cast<uint32_t>(payload.size());
  m[1] = static_cast<char>(n >> 24);
  m[2] = static_cast<char>(n >> 16);
  m[3] = static_cast<char>(n >> 8);
  m[4] = static_cast<char>(n);
  return m + payload;
}

TEST(H2ScrubbedBody, GrpcMessagesAreReleasedWholeAtTheirEnd) {
  // The message ends in what could be the start of the secret: a plain body holds it back.
  const std::string first = grpc_message("{\"note\":\"ghp_SCR");
  for (std::string type :
       {"application/grpc", "application/grpc+proto", "application/connect+json"}) {
    HeaderList headers = {{"content-type", type}};
    ScrubbedBody b(patterns(), headers);
    ASSERT_FALSE(b.failed());
    EXPECT_TRUE(b.enveloped()) << type;
    std::string out;
    b.feed(first, out);
    EXPECT_EQ(out, first) << type;  // nothing held back at the message's end
    // A secret split over feeds inside one message is still found, the framing kept.
    const std::string second = grpc_message(std::string("x") + kSecret + "y");
    out.clear();
    b.feed(second.substr(0, 12), out);
    b.feed(second.substr(12), out);
    EXPECT_EQ(out, grpc_message(std::string("x") + std::string(strlen(kSecret), '*') + "y"))
        << type;
    EXPECT_EQ(b.matches(), 1u);
    out.clear();
    EXPECT_TRUE(b.finish(out));
    EXPECT_TRUE(out.empty());
  }
  // Not enveloped: the same bytes keep their possible secret prefix until more comes.
  HeaderList headers = {{"content-type", "application/octet-stream"}};
  ScrubbedBody plain(patterns(), headers);
  EXPECT_FALSE(plain.enveloped());
  std::string out;
  plain.feed(first, out);
  EXPECT_LT(out.size(), first.size());
  plain.finish(out);
  EXPECT_EQ(out, first);
}

TEST(H2ScrubbedBody, IdentityKeepsTheLengthAndTheHead) {
  const std::string plain = echo_body();
  HeaderList headers = {{"Content-Type", "application/json"},
                        {"Content-Length", std::to_string(plain.size())}};
  const HeaderList before = headers;
  ScrubbedBody b(patterns(), headers);
  EXPECT_FALSE(b.decoded());
  EXPECT_EQ(headers, before);
  std::string out = run(b, plain, 777, 4096);
  EXPECT_EQ(out.size(), plain.size());
  EXPECT_TRUE(out == blanked(plain));
  std::vector<std::pair<std::string, uint64_t>> counts;
  b.add_counts(counts);
  EXPECT_EQ(counts,
            (std::vector<std::pair<std::string, uint64_t>>{{"body_secrets_scrubbed", 2001}}));
}

}  // namespace
}  // namespace cordon::gateway::h2
