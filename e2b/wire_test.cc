#include "e2b/wire.h"

#include <gtest/gtest.h>

namespace cordon::e2b {
namespace {

using sandbox::SandboxRecord;
using sandbox::SandboxState;

TEST(Wire, ErrorBodyHasCodeAndMessage) {
  auto j = nlohmann::json::parse(error_body(404, "sandbox \"x\" not found"));
  EXPECT_EQ(j["code"], 404);
  EXPECT_EQ(j["message"], "sandbox \"x\" not found");
  // Invalid UTF-8 in a message never breaks the body.
  EXPECT_NO_THROW(nlohmann::json::parse(error_body(400, "bad \xff byte")));
}

TEST(Wire, PercentDecode) {
  EXPECT_EQ(*percent_decode("a%20b+c", true), "a b c");
  EXPECT_EQ(*percent_decode("a+b", false), "a+b");
  EXPECT_FALSE(percent_decode("%G1", true));
  EXPECT_FALSE(percent_decode("abc%", true));
  EXPECT_FALSE(percent_decode("abc%2", true));
}

TEST(Wire, MetadataTripleDecodingAsTheSdkEncodes) {
  // {"a b":"c&d"} as the SDK sends it: metadata=a%252520b%3Dc%252526d
  auto q = parse_query("metadata=a%252520b%3Dc%252526d&state=running");
  ASSERT_TRUE(q) << q.error().message;
  ASSERT_EQ((*q)[0].first, "metadata");
  auto m = decode_metadata_filter((*q)[0].second);
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ(m->at("a b"), "c&d");
  // {"user":"abc"} → metadata=user%3Dabc
  auto q2 = parse_list_query("metadata=user%3Dabc");
  ASSERT_TRUE(q2);
  EXPECT_EQ(q2->metadata.at("user"), "abc");
  // Two pairs: {"k1":"v1","k2":"v=2"}: k1%3Dv1%26k2%3Dv%25253D2
  auto q3 = parse_list_query("metadata=k1%3Dv1%26k2%3Dv%25253D2");
  ASSERT_TRUE(q3) << q3.error().message;
  EXPECT_EQ(q3->metadata.at("k1"), "v1");
  EXPECT_EQ(q3->metadata.at("k2"), "v=2");
  EXPECT_FALSE(parse_list_query("metadata=novalue"));
  EXPECT_FALSE(parse_list_query("metadata=%25ZZ"));
}

TEST(Wire, ListQueryFields) {
  auto q = parse_list_query("state=running,paused&limit=5&order=desc&template=base");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->states.size(), 2u);
  EXPECT_EQ(q->limit, 5u);
  EXPECT_TRUE(q->descending);
  EXPECT_EQ(q->template_name, "base");
  EXPECT_EQ(parse_list_query("limit=100000")->limit, kMaxListLimit);
  EXPECT_FALSE(parse_list_query("limit=0"));
  EXPECT_FALSE(parse_list_query("limit=x"));
  EXPECT_FALSE(parse_list_query("state=dead"));
  EXPECT_FALSE(parse_list_query("nextToken=garbage!"));
  EXPECT_FALSE(parse_list_query("order=sideways"));
  EXPECT_TRUE(parse_list_query("unknown=1"));
}

TEST(Wire, CursorRoundTripAndRejectsForgeries) {
  Cursor c{1796000000123456, "abc123"};
  auto d = decode_cursor(encode_cursor(c));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->started_us, c.started_us);
  EXPECT_EQ(d->id, "abc123");
  EXPECT_FALSE(decode_cursor("bm90YWN1cnNvcg"));  // "notacursor"
  EXPECT_FALSE(decode_cursor(encode_cursor({5, "BAD ID"})));
}

std::vector<SandboxRecord> records(int n, const std::string& owner) {
  std::vector<SandboxRecord> v;
  for (int i = 0; i < n; ++i) {
    SandboxRecord r;
    r.id = "sbx" + std::to_string(100 + i);
    r.owner = owner;
    r.started_at = SystemTime(std::chrono::seconds(1000 + i / 2));  // pairs share a time
    r.state = i % 3 == 0 ? SandboxState::kPaused : SandboxState::kRunning;
    r.metadata["i"] = std::to_string(i);
    r.metadata["even"] = i % 2 ? "no" : "yes";
    v.push_back(r);
  }
  return v;
}

TEST(Wire, PagingVisitsEachSandboxOnceInOrder) {
  auto all = records(11, "k1");
  auto other = records(3, "k2");
  all.insert(all.end(), other.begin(), other.end());
  for (bool desc : {false, true}) {
    ListQuery q;
    q.limit = 3;
    q.descending = desc;
    std::vector<std::string> seen;
    for (int pages = 0; pages < 10; ++pages) {
      ListPage p = select_page(all, "k1", q);
      for (auto* r : p.items) seen.push_back(r->id);
      if (!p.next_token) break;
      q.after = *decode_cursor(*p.next_token);
    }
    ASSERT_EQ(seen.size(), 11u) << "desc=" << desc;
    std::set<std::string> uniq(seen.begin(), seen.end());
    EXPECT_EQ(uniq.size(), 11u);
    EXPECT_EQ(seen.front(), desc ? "sbx110" : "sbx100");
  }
}

TEST(Wire, PageFilters) {
  auto all = records(9, "k1");
  ListQuery q;
  q.states = {SandboxState::kPaused};
  EXPECT_EQ(select_page(all, "k1", q).items.size(), 3u);
  q.states.clear();
  q.metadata = {{"even", "yes"}};
  EXPECT_EQ(select_page(all, "k1", q).items.size(), 5u);
  q.metadata = {{"even", "yes"}, {"i", "4"}};
  ASSERT_EQ(select_page(all, "k1", q).items.size(), 1u);
  EXPECT_EQ(select_page(all, "k1", q).items[0]->id, "sbx104");
  EXPECT_TRUE(select_page(all, "k2", ListQuery{}).items.empty());
  ListQuery t;
  t.started_after = SystemTime(std::chrono::seconds(1002));
  EXPECT_EQ(select_page(all, "k1", t).items.size(), 3u);  // started at 1003, 1003, 1004
}

TEST(Wire, ParseCreate) {
  auto c = parse_create(
      R"({"templateID":"base","timeout":60,"metadata":{"user":"abc"},"envVars":{"FOO":"bar"},)"
      R"("allow_internet_access":false,"autoPause":true,"autoPauseMemory":true,)"
      R"("autoResume":{"enabled":false},"volumeMounts":[],"iam":{"tokens":{}},)"
      R"("network":{"rules":{},"httpsPorts":[],"egressProxy":null,"allowPublicTraffic":true}})");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->template_name, "base");
  EXPECT_EQ(c->timeout.count(), 60);
  EXPECT_EQ(c->metadata.at("user"), "abc");
  EXPECT_EQ(c->env_vars.at("FOO"), "bar");
  EXPECT_FALSE(c->network.internet);
  EXPECT_TRUE(c->auto_pause);
  EXPECT_EQ(parse_create(R"({"templateID":"base"})")->timeout, kDefaultTimeout);

  auto bad = [](std::string body, std::string want) {
    auto r = parse_create(body);
    ASSERT_FALSE(r) << body;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
  };
  bad("{", "not valid JSON");
  bad("[]", "JSON object");
  bad("{}", "templateID: required");
  bad(R"({"templateID":5})", "templateID");
  bad(R"({"templateID":"b","timeout":"60"})", "timeout");
  bad(R"({"templateID":"b","timeout":0})", "out of range");
  bad(R"({"templateID":"b","timeout":99999999})", "out of range");
  bad(R"({"templateID":"b","metadata":{"k":1}})", "metadata.k");
  bad(R"({"templateID":"b","envVars":[]})", "envVars");
  bad(R"({"templateID":"b","allow_internet_access":"no"})", "allow_internet_access");
  bad(R"({"templateID":"b","network":{"denyOut":["10.0.0.0/8"]}})", "network.denyOut[0]");
  bad(R"({"templateID":"b","network":{"allowOut":["ok.com","b\u00fccher.de"]}})",
      "network.allowOut[1]");
}

TEST(Wire, TimeoutAndConnectBodies) {
  EXPECT_EQ(parse_timeout_body(R"({"timeout":120})")->count(), 120);
  EXPECT_FALSE(parse_timeout_body("{}"));
  EXPECT_FALSE(*parse_connect_body(""));
  EXPECT_FALSE(*parse_connect_body("{}"));
  EXPECT_EQ((*parse_connect_body(R"({"timeout":30,"memory":true})"))->count(), 30);
  auto n = parse_network_body(R"({"allowOut":["a.com"],"denyOut":["0.0.0.0/0"]})");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->allow_out.size(), 1u);
  auto w = parse_network_body(R"({"network":{"denyOut":["b.com"]},"allow_internet_access":true})");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->deny_out[0], "b.com");
}

// A field cordon does not carry out is refused by name, never ignored; so is one the schema
// does not have. Its inert value (the schema's default) is accepted.
TEST(Wire, FieldsCordonDoesNotCarryOutAreRefusedByName) {
  auto refused = [](const Result<CreateRequest>& r, std::string want) {
    ASSERT_FALSE(r) << want;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("refused rather than ignored"), std::string::npos)
        << r.error().message;
  };
  auto create = [](std::string extra) {
    return parse_create(R"({"templateID":"base",)" + extra + "}");
  };
  refused(create(R"("network":{"egressProxy":{"address":"p.example:1080"}})"),
          "network.egressProxy: not supported");
  refused(create(R"("network":{"rules":{"api.x.com":[{"transform":{"headers":{"A":"b"}}}]}})"),
          "network.rules: not supported");
  refused(create(R"("network":{"allowPublicTraffic":false})"), "network.allowPublicTraffic");
  refused(create(R"("network":{"httpsPorts":[8443]})"), "network.httpsPorts");
  refused(create(R"("network":{"maskRequestHost":"x.${PORT}"})"), "network.maskRequestHost");
  refused(create(R"("network":{"alowOut":["a.com"]})"), "network.alowOut: unknown field");
  refused(create(R"("iam":{"tokens":{"aws":{"audience":"sts","tokenType":"JWT-SVID"}}})"),
          "iam: not supported");
  refused(create(R"("volumeMounts":[{"name":"v","path":"/data"}])"), "volumeMounts");
  refused(create(R"("autoPauseMemory":false)"), "autoPauseMemory");
  refused(create(R"("autoResume":{"enabled":true})"), "autoResume");
  refused(create(R"("mcp":{"github":{}})"), "mcp");
  refused(create(R"("secure":false)"), "secure");
  refused(create(R"("whatever":{"x":1})"), "whatever: unknown field");

  auto update = parse_network_body(R"({"egressProxy":{"address":"p.example:1080"}})");
  ASSERT_FALSE(update);
  EXPECT_NE(update.error().message.find("egressProxy: not supported"), std::string::npos);
  auto wrapped = parse_network_body(R"({"network":{"rules":{"a.com":[{}]}}})");
  ASSERT_FALSE(wrapped);
  EXPECT_NE(wrapped.error().message.find("network.rules: not supported"), std::string::npos);
  EXPECT_FALSE(parse_network_body(R"({"httpsPorts":[]})"));  // not a field of the update

  auto connect = parse_connect_body(R"({"timeout":30,"memory":false})");
  ASSERT_FALSE(connect);
  EXPECT_NE(connect.error().message.find("memory: not supported"), std::string::npos);
  EXPECT_FALSE(parse_connect_body(R"({"autoPause":true})", /*v1_resume=*/true));
  EXPECT_TRUE(parse_connect_body(R"({"autoPause":false,"timeout":5})", /*v1_resume=*/true));
  EXPECT_FALSE(parse_connect_body(R"({"autoPause":false})"));  // not a field of connect
  EXPECT_TRUE(parse_pause_body(""));
  EXPECT_TRUE(parse_pause_body(R"({"memory":true})"));
  auto pause = parse_pause_body(R"({"memory":false})");
  ASSERT_FALSE(pause);
  EXPECT_NE(pause.error().message.find("memory: not supported"), std::string::npos);
  EXPECT_FALSE(parse_timeout_body(R"({"timeout":5,"extra":1})"));
}

TEST(Wire, Rfc3339AndShapes) {
  SystemTime t = SystemTime(std::chrono::milliseconds(1796000000123));
  EXPECT_EQ(rfc3339(t), "2026-11-30T00:53:20.123Z");
  SandboxRecord r;
  r.id = "abc";
  r.template_id = "tpl";
  r.template_alias = "base";
  r.envd_access_token = "tok";
  auto s = sandbox_json(r, "cordon");
  EXPECT_EQ(s["sandboxID"], "abc");
  EXPECT_EQ(s["envdVersion"], "0.6.13");  // default when the template did not say
  EXPECT_EQ(s["envdAccessToken"], "tok");
  EXPECT_EQ(s["alias"], "base");
  EXPECT_TRUE(s.contains("clientID"));
  auto l = listed_json(r);
  EXPECT_EQ(l["state"], "running");
  EXPECT_EQ(l["memoryMB"], 512);
  EXPECT_EQ(l["cpuCount"], 1);
  EXPECT_FALSE(l.contains("envdAccessToken"));
  auto d = detail_json(r);
  EXPECT_EQ(d["envdAccessToken"], "tok");
  EXPECT_EQ(d["lifecycle"]["onTimeout"], "kill");
  sandbox::SandboxMetrics m;
  m.at = t;
  EXPECT_EQ(metric_json(m)["timestampUnix"], 1796000000);
}

TEST(Wire, PlausibleIds) {
  EXPECT_TRUE(plausible_sandbox_id("abc123def456ghi789jk"));
  EXPECT_FALSE(plausible_sandbox_id(""));
  EXPECT_FALSE(plausible_sandbox_id("../etc"));
  EXPECT_FALSE(plausible_sandbox_id("ABC"));
  EXPECT_FALSE(plausible_sandbox_id(std::string(65, 'a')));
}

}  // namespace
}  // namespace cordon::e2b
