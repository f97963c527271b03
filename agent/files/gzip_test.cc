#include "agent/files/gzip.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace cordon::agent::files {
namespace {

std::string compress(std::string_view data, size_t piece = 1000) {
  GzipEncoder enc;
  std::string out;
  ByteSink sink = [&](std::string_view b) {
    out.append(b);
    return Status{};
  };
  for (size_t i = 0; i < data.size(); i += piece)
    EXPECT_TRUE(enc.write(data.substr(i, piece), sink));
  EXPECT_TRUE(enc.finish(sink));
  return out;
}

Result<std::string> decompress(std::string_view gz, size_t piece, GzipLimits lim = {}) {
  GzipDecoder dec(lim);
  std::string out;
  ByteSink sink = [&](std::string_view b) {
    out.append(b);
    return Status{};
  };
  for (size_t i = 0; i < gz.size(); i += piece)
    if (auto s = dec.write(gz.substr(i, piece), sink); !s) return fail(s.error());
  if (auto s = dec.finish(); !s) return fail(s.error());
  return out;
}

std::string random_bytes(size_t n) {
  std::mt19937 rng(42);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(Gzip, RoundTripAnySplit) {
  std::string data = random_bytes(300000) + std::string(300000, 'a');
  std::string gz = compress(data, 4096);
  ASSERT_GE(gz.size(), 10u);
  EXPECT_EQ(uint8_t(gz[0]), 0x1f);
  EXPECT_EQ(uint8_t(gz[1]), 0x8b);
  for (size_t piece : {size_t(1), size_t(7), size_t(65536), gz.size()}) {
    auto out = decompress(gz, piece);
    ASSERT_TRUE(out) << out.error().message;
    EXPECT_EQ(*out, data);
  }
}

TEST(Gzip, EmptyInputRoundTrips) {
  auto out = decompress(compress(""), 3);
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, "");
}

TEST(Gzip, ConcatenatedMembers) {
  auto out = decompress(compress("hello ") + compress("world"), 5);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(*out, "hello world");
}

TEST(Gzip, TruncatedIsAnError) {
  std::string gz = compress(random_bytes(10000));
  auto out = decompress(gz.substr(0, gz.size() - 4), 100);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("truncated"), std::string::npos);
}

TEST(Gzip, CorruptIsAnError) {
  auto out = decompress("not gzip at all", 4);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("corrupt"), std::string::npos);
  EXPECT_FALSE(decompress("", 1));
}

TEST(Gzip, BombIsRefusedEarly) {
  // 256 MiB of zeros compress to ~250 KiB; with a 1 MiB grace the decoder stops long before.
  GzipEncoder enc;
  std::string gz;
  ByteSink to_gz = [&](std::string_view b) {
    gz.append(b);
    return Status{};
  };
  std::string zeros(1 << 20, '\0');
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(enc.write(zeros, to_gz));
  ASSERT_TRUE(enc.finish(to_gz));
  GzipLimits lim;
  lim.ratio_grace_bytes = 1 << 20;
  GzipDecoder dec(lim);
  uint64_t produced = 0;
  ByteSink count = [&](std::string_view b) {
    produced += b.size();
    return Status{};
  };
  Status s;
  for (size_t i = 0; i < gz.size() && s; i += 65536)
    s = dec.write(std::string_view(gz).substr(i, 65536), count);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("decompression bomb"), std::string::npos);
  EXPECT_LT(produced, 8u << 20);
}

TEST(Gzip, SinkErrorPropagates) {
  std::string gz = compress(random_bytes(1000));
  GzipDecoder dec;
  auto s = dec.write(gz, [](std::string_view) { return Status(fail("full", 507)); });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, 507);
}

}  // namespace
}  // namespace cordon::agent::files
