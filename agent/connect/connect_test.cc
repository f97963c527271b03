#include "agent/connect/connect.h"

#include <gtest/gtest.h>

#include "agent/proto/process.pb.h"

namespace cordon::agent::connect {
namespace {

TEST(Envelope, EncodesFlagsAndBigEndianLength) {
  std::string e = encode_envelope(kFlagEndStream, "{}");
  ASSERT_EQ(e.size(), 7u);
  EXPECT_EQ(e[0], 0x02);
  EXPECT_EQ(std::string(e.data() + 1, 4), std::string("\0\0\0\x02", 4));
  EXPECT_EQ(e.substr(5), "{}");
}

TEST(EnvelopeReader, ReassemblesSplitFeeds) {
  std::string wire = encode_envelope(0, R"({"a":1})") + encode_envelope(kFlagEndStream, "{}");
  for (size_t step = 1; step <= wire.size(); ++step) {
    EnvelopeReader r;
    std::vector<EnvelopeReader::Envelope> got;
    for (size_t i = 0; i < wire.size(); i += step) {
      ASSERT_TRUE(r.feed(wire.substr(i, step)));
      while (auto e = r.next()) got.push_back(*e);
    }
    ASSERT_EQ(got.size(), 2u) << "step " << step;
    EXPECT_EQ(got[0].flags, 0);
    EXPECT_EQ(got[0].payload, R"({"a":1})");
    EXPECT_EQ(got[1].flags, kFlagEndStream);
    EXPECT_EQ(r.buffered(), 0u);
  }
}

TEST(EnvelopeReader, IncompleteYieldsNothing) {
  EnvelopeReader r;
  ASSERT_TRUE(r.feed(std::string("\0\0\0\0\x05{}", 7)));
  EXPECT_FALSE(r.next().has_value());
  EXPECT_EQ(r.buffered(), 7u);
}

TEST(EnvelopeReader, RejectsCompressedAndOversized) {
  EnvelopeReader a;
  auto st = a.feed(std::string("\x01\0\0\0\x02{}", 7));
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("compressed"), std::string::npos);
  EnvelopeReader b;
  st = b.feed(std::string("\0\x7f\xff\xff\xff", 5));
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("over the limit"), std::string::npos);
}

TEST(Codes, NamesAndStatuses) {
  EXPECT_EQ(code_name(Code::kInvalidArgument), "invalid_argument");
  EXPECT_EQ(http_status(Code::kInvalidArgument), 400);
  EXPECT_EQ(code_name(Code::kNotFound), "not_found");
  EXPECT_EQ(http_status(Code::kNotFound), 404);
  EXPECT_EQ(code_name(Code::kDeadlineExceeded), "deadline_exceeded");
  EXPECT_EQ(http_status(Code::kDeadlineExceeded), 504);
  EXPECT_EQ(http_status(Code::kCanceled), 499);
  EXPECT_EQ(code_name(Code::kUnauthenticated), "unauthenticated");
  EXPECT_EQ(http_status(Code::kUnauthenticated), 401);
  EXPECT_EQ(http_status(Code::kResourceExhausted), 429);
  EXPECT_EQ(http_status(Code::kUnimplemented), 501);
  EXPECT_EQ(http_status(Code::kUnavailable), 503);
}

// --- proto3 JSON accept rules (e2b-compat.md §4) ---

TEST(Json, SdkStartRequest) {
  ::process::StartRequest req;
  ASSERT_TRUE(parse_json(
      R"({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"b"},"cwd":"/tmp"},"stdin":false})",
      req));
  EXPECT_EQ(req.process().cmd(), "/bin/bash");
  ASSERT_EQ(req.process().args_size(), 3);
  EXPECT_EQ(req.process().envs().at("A"), "b");
  EXPECT_TRUE(req.process().has_cwd());
  EXPECT_TRUE(req.has_stdin());
  EXPECT_FALSE(req.stdin());
  EXPECT_FALSE(req.has_pty());
}

TEST(Json, SnakeCaseNamesAccepted) {
  ::process::ProcessEvent ev;
  ASSERT_TRUE(parse_json(R"({"end":{"exit_code":3,"exited":true}})", ev));
  EXPECT_EQ(ev.end().exit_code(), 3);
  ASSERT_TRUE(parse_json(R"({"end":{"exitCode":4}})", ev));
  EXPECT_EQ(ev.end().exit_code(), 4);
}

TEST(Json, EnumsByNameOrNumber) {
  ::process::SendSignalRequest req;
  ASSERT_TRUE(parse_json(R"({"process":{"pid":7},"signal":"SIGNAL_SIGKILL"})", req));
  EXPECT_EQ(req.signal(), ::process::SIGNAL_SIGKILL);
  EXPECT_EQ(req.process().pid(), 7u);
  ASSERT_TRUE(parse_json(R"({"process":{"pid":7},"signal":15})", req));
  EXPECT_EQ(req.signal(), ::process::SIGNAL_SIGTERM);
}

TEST(Json, UnknownEnumNameIsIgnored) {
  ::process::SendSignalRequest req;
  ASSERT_TRUE(parse_json(R"({"signal":"SIGNAL_NOPE"})", req));
  EXPECT_EQ(req.signal(), ::process::SIGNAL_UNSPECIFIED);
}

TEST(Json, UintAsStringOrNumber) {
  ::process::ConnectRequest req;
  ASSERT_TRUE(parse_json(R"({"process":{"pid":"1000"}})", req));
  EXPECT_EQ(req.process().pid(), 1000u);
  ASSERT_TRUE(parse_json(R"({"process":{"pid":1000}})", req));
  EXPECT_EQ(req.process().pid(), 1000u);
}

TEST(Json, Base64Variants) {
  // "abc\n>?" exercises the characters where the alphabets differ ('+/' vs '-_').
  const std::string want = "abc\n>?";
  for (const char* b64 : {"YWJjCj4/", "YWJjCj4_", "YWJjCg==", "YWJjCg"}) {
    ::process::SendInputRequest req;
    std::string json = std::string(R"({"process":{"pid":1},"input":{"stdin":")") + b64 + "\"}}";
    ASSERT_TRUE(parse_json(json, req)) << b64;
    std::string expect = std::string(b64).rfind("YWJjCj4", 0) == 0 ? want : "abc\n";
    EXPECT_EQ(req.input().stdin(), expect) << b64;
  }
}

TEST(Json, NullIsDefault) {
  ::process::StartRequest req;
  ASSERT_TRUE(parse_json(R"({"process":{"cmd":"x","cwd":null,"args":null},"tag":null})", req));
  EXPECT_EQ(req.process().cmd(), "x");
  EXPECT_FALSE(req.has_tag());
  EXPECT_EQ(req.process().args_size(), 0);
}

TEST(Json, UnknownFieldsIgnored) {
  ::process::ListRequest req;
  ASSERT_TRUE(parse_json(R"({"future":{"x":[1,2]},"y":"z"})", req));
}

TEST(Json, TwoOneofMembersRejected) {
  ::process::ProcessSelector sel;
  auto st = parse_json(R"({"pid":1,"tag":"a"})", sel);
  EXPECT_FALSE(st);
}

TEST(Json, MalformedRejectedWithMessage) {
  ::process::StartRequest req;
  auto st = parse_json(R"({"process":)", req);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("process.StartRequest"), std::string::npos);
  EXPECT_FALSE(parse_json("", req));
  EXPECT_FALSE(parse_json(R"({"stdin":1})", req));
  EXPECT_FALSE(parse_json(R"({"process":{"cmd":5}})", req));
  EXPECT_FALSE(parse_json(R"({"pty":{"size":{"cols":"x"}}})", req));
}

// Where protobuf 3.21's parser is more lenient than protobuf-es: a quoted bool and a scalar for
// a repeated field are taken. Harmless for the agent (the SDK never sends them); pinned here
// so that a protobuf upgrade that changes it is noticed.
TEST(Json, KnownLeniencies) {
  ::process::StartRequest req;
  EXPECT_TRUE(parse_json(R"({"stdin":"true"})", req));
  EXPECT_TRUE(req.stdin());
  EXPECT_TRUE(parse_json(R"({"process":{"args":"a"}})", req));
}

TEST(Json, PrintsLowerCamelOmitsDefaultsKeepsSetOptionals) {
  ::process::StartResponse r;
  auto* end = r.mutable_event()->mutable_end();
  end->set_exit_code(3);
  end->set_exited(true);
  end->set_status("exit status 3");
  end->set_error("exit status 3");
  EXPECT_EQ(
      to_json(r),
      R"({"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}})");
  ::process::StartResponse d;
  d.mutable_event()->mutable_data()->set_stdout("hello\n");
  EXPECT_EQ(to_json(d), R"({"event":{"data":{"stdout":"aGVsbG8K"}}})");
  ::process::StartResponse k;
  k.mutable_event()->mutable_keepalive();
  EXPECT_EQ(to_json(k), R"({"event":{"keepalive":{}}})");
  ::process::ListResponse l;
  l.add_processes()->mutable_config();
  EXPECT_EQ(to_json(l), R"({"processes":[{"config":{}}]})");
}

TEST(Timeout, ParsesHeader) {
  http::RequestHead h;
  EXPECT_FALSE(timeout_ms(h).has_value());
  h.headers["connect-timeout-ms"] = "60000";
  EXPECT_EQ(timeout_ms(h), 60000u);
  h.headers["connect-timeout-ms"] = "-1";
  EXPECT_FALSE(timeout_ms(h).has_value());
  h.headers["connect-timeout-ms"] = "99999999999";
  EXPECT_FALSE(timeout_ms(h).has_value());
}

}  // namespace
}  // namespace cordon::agent::connect
