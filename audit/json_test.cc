#include "audit/detail/json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "audit/detail/format.h"
#include "audit/limits.h"

namespace cordon::audit::detail {
namespace {

std::string esc(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

bool valid_utf8(std::string_view s) {
  try {
    (void)nlohmann::json(std::string(s)).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

TEST(JsonEscape, QuotesBackslashesAndControls) {
  EXPECT_EQ(esc("plain"), "\"plain\"");
  EXPECT_EQ(esc("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(esc("a\\b"), "\"a\\\\b\"");
  EXPECT_EQ(esc("a\nb\rc\td"), "\"a\\nb\\rc\\td\"");
  EXPECT_EQ(esc(std::string("\0\x01\x1f\x7f", 4)), "\"\\u0000\\u0001\\u001f\\u007f\"");
  EXPECT_EQ(esc("\x1b[31mred"), "\"\\u001b[31mred\"");
  EXPECT_EQ(esc("/"), "\"/\"");
}

TEST(JsonEscape, LineSeparatorsAreEscaped) {
  EXPECT_EQ(esc("a\xe2\x80\xa8"
                "b\xe2\x80\xa9"),
            "\"a\\u2028b\\u2029\"");
}

TEST(JsonEscape, ValidUtf8PassesThrough) {
  EXPECT_EQ(esc("caf\xc3\xa9 \xf0\x9f\x98\x80 \xe4\xb8\xad"),
            "\"caf\xc3\xa9 \xf0\x9f\x98\x80 \xe4\xb8\xad\"");
  EXPECT_EQ(esc("\xef\xbf\xbf\xf4\x8f\xbf\xbf"), "\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\"");
}

TEST(JsonEscape, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(esc("a\x80z"), "\"a\\ufffdz\"");                               // stray continuation
  EXPECT_EQ(esc("\xc0\xaf"), "\"\\ufffd\\ufffd\"");                        // overlong '/'
  EXPECT_EQ(esc("\xe0\x80\xaf"), "\"\\ufffd\\ufffd\\ufffd\"");             // overlong, 3 bytes
  EXPECT_EQ(esc("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");             // UTF-16 surrogate
  EXPECT_EQ(esc("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // > U+10FFFF
  EXPECT_EQ(esc("\xff\xfe"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(esc("ok\xe2\x82"), "\"ok\\ufffd\\ufffd\"");  // truncated at the end
  EXPECT_EQ(esc("\xc3"
                "A"),
            "\"\\ufffdA\"");  // lead byte then ASCII
}

// Random bytes, biased towards the dangerous ones: whatever the input, the output is one JSON
// string with no raw control bytes and no line separators, that every parser reads back.
TEST(JsonEscape, RandomInputsAlwaysGiveOneSafeJsonString) {
  std::mt19937 rng(12345);
  const std::string specials =
      std::string("\"\\\n\r\t\0\x7f\x80\xbf\xc0\xc3\xe2\x80\xa8\xed\xf4\xff", 17);
  for (int round = 0; round < 3000; ++round) {
    std::string s;
    size_t len = rng() % 40;
    for (size_t i = 0; i < len; ++i) {
      s += (rng() % 3 == 0) ? specials[rng() % specials.size()] : char(rng() % 256);
    }
    std::string out = esc(s);
    for (unsigned char c : out) {
      ASSERT_TRUE(c >= 0x20 && c != 0x7f) << "raw control byte";
    }
    ASSERT_EQ(out.find("\xe2\x80\xa8"), std::string::npos);
    ASSERT_EQ(out.find("\xe2\x80\xa9"), std::string::npos);
    auto parsed = nlohmann::json::parse(out);  // throws (fails the test) on invalid JSON
    ASSERT_TRUE(parsed.is_string());
    if (valid_utf8(s)) {
      ASSERT_EQ(parsed.get<std::string>(), s);
    }

    std::string obj = "{\"k\":" + out + "}";
    std::vector<ScannedField> fields;
    ASSERT_EQ(scan_object(obj, fields), nullptr) << obj;
    ASSERT_EQ(fields.size(), 1u);
    ASSERT_EQ(unescape(fields[0]), parsed.get<std::string>());
  }
}

TEST(Format, HostileValuesCannotForgeFieldsOrLines) {
  Event e;
  e.event = "request";
  e.sandbox = "sb\",\"decision\":\"allow";
  e.decision = "deny";
  e.reason = "x\n{\"ts\":\"2026-01-01T00:00:00.000000Z\",\"seq\":1}\r\n";
  e.rule = "r\\\"";
  e.add("path", std::string("/a\0b\xe2\x80\xa8\xff", 8)).add("port", int64_t(443)).add("tls", true);
  auto body = format_body(e);
  ASSERT_TRUE(body) << body.error().message;
  std::string line = format_line(std::chrono::system_clock::now(), 7, *body, kGenesisPrev);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.find('\r'), std::string::npos);
  std::vector<ScannedField> f;
  ASSERT_EQ(scan_object(line, f), nullptr);
  std::vector<std::string> keys;
  for (auto& x : f) keys.emplace_back(x.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"ts", "seq", "event", "sandbox", "decision", "reason",
                                            "rule", "path", "port", "tls", "prev"}));
  EXPECT_EQ(unescape(f[3]), e.sandbox);
  EXPECT_EQ(unescape(f[4]), "deny");
  EXPECT_EQ(unescape(f[5]), e.reason);
  EXPECT_EQ(unescape(f[6]), e.rule);
  EXPECT_EQ(unescape(f[7]), std::string("/a\0b\xe2\x80\xa8\xef\xbf\xbd", 10));
  EXPECT_EQ(*to_int(f[8]), 443);
  EXPECT_EQ(f[9].kind, ValueKind::kTrue);
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["decision"], "deny");
  EXPECT_EQ(j["seq"], 7);
}

TEST(Format, KeysAreCheckedAndValuesCapped) {
  Event e;
  e.event = "x";
  EXPECT_TRUE(format_body(e));
  e.fields = {{"prev", std::string("forged")}};
  EXPECT_FALSE(format_body(e));
  e.fields = {{"decision", std::string("allow")}};
  EXPECT_FALSE(format_body(e));
  e.fields = {{"a", int64_t(1)}, {"a", int64_t(2)}};
  EXPECT_FALSE(format_body(e));
  e.fields = {{"bad\"key", int64_t(1)}};
  EXPECT_FALSE(format_body(e));
  e.fields = {{"", int64_t(1)}};
  EXPECT_FALSE(format_body(e));
  e.fields.clear();
  for (size_t i = 0; i <= kMaxExtraFields; ++i) e.add("k" + std::to_string(i), int64_t(i));
  EXPECT_FALSE(format_body(e));
  Event empty;
  EXPECT_FALSE(format_body(empty));  // no event name

  Event big;
  big.event = "x";
  big.reason = std::string(kMaxValueBytes * 3, 'a');
  auto body = format_body(big);
  ASSERT_TRUE(body);
  EXPECT_LT(body->size(), kMaxValueBytes + 200);
  EXPECT_NE(body->find("[truncated " + std::to_string(kMaxValueBytes * 2) + " bytes]"),
            std::string::npos);
}

TEST(Scanner, AcceptsTheWritersShapeOnly) {
  std::vector<ScannedField> f;
  EXPECT_EQ(scan_object("{}", f), nullptr);
  EXPECT_EQ(scan_object("{\"a\":\"x\",\"b\":-12,\"c\":false,\"d\":null}", f), nullptr);
  EXPECT_EQ(f.size(), 4u);
  EXPECT_EQ(*to_int(f[1]), -12);
  const char* bad[] = {
      "",
      "{",
      "{\"a\":\"x\"",
      "{\"a\":\"x\"}x",
      "{\"a\": \"x\"}",
      "{\"a\":{\"b\":1}}",
      "{\"a\":[1]}",
      "{\"a\":1.5}",
      "{\"a\":01}",
      "{\"a\":\"x\ty\"}",
      "{\"a\":\"\\x\"}",
      "{\"a\":\"\\u12\"}",
      "{\"a\\\"\":1}",
      "{\"a\":tru}",
      "[1]",
      "{\"a\":\"x\",}",
  };
  for (const char* b : bad) EXPECT_NE(scan_object(b, f), nullptr) << b;
}

TEST(Scanner, UnescapesSurrogatePairsAndLoneSurrogates) {
  std::vector<ScannedField> f;
  ASSERT_EQ(scan_object("{\"a\":\"\\ud83d\\ude00|\\ud800|\\u00e9\\/\"}", f), nullptr);
  EXPECT_EQ(unescape(f[0]), "\xf0\x9f\x98\x80|\xef\xbf\xbd|\xc3\xa9/");
}

}  // namespace
}  // namespace cordon::audit::detail
