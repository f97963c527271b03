#include "e2b/control_plane.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "e2b/testing/fake_service.h"

namespace cordon::e2b {
namespace {

using nlohmann::json;

class ControlPlaneTest : public ::testing::Test {
 protected:
  ControlPlaneTest() {
    svc = std::make_shared<testing::FakeService>();
    keys = std::make_shared<ApiKeyCache>([](std::string_view k) -> Result<vault::ApiKeyGrant> {
      if (k == "key-a") return vault::ApiKeyGrant{"ida", "profile-a"};
      if (k == "key-b") return vault::ApiKeyGrant{"idb", "profile-b"};
      return fail("refused", vault::code(vault::ErrorCode::kRefused));
    });
    cp = std::make_unique<ControlPlane>(svc, keys);
  }
  ApiResponse call(std::string method, std::string target, std::string body = "",
                   std::optional<std::string> key = "key-a") {
    ApiRequest r;
    r.method = std::move(method);
    r.target = std::move(target);
    r.body = std::move(body);
    r.api_key = std::move(key);
    return cp->handle(r);
  }
  static json body(const ApiResponse& r) { return json::parse(r.body); }
  static std::string header(const ApiResponse& r, const std::string& name) {
    for (auto& [k, v] : r.headers)
      if (k == name) return v;
    return "";
  }
  std::string create(std::string key = "key-a", std::string extra = "") {
    auto r =
        call("POST", "/v2/sandboxes", R"({"templateID":"base","timeout":60)" + extra + "}", key);
    EXPECT_EQ(r.status, 201) << r.body;
    return body(r)["sandboxID"];
  }

  std::shared_ptr<testing::FakeService> svc;
  std::shared_ptr<ApiKeyCache> keys;
  std::unique_ptr<ControlPlane> cp;
};

TEST_F(ControlPlaneTest, AuthErrors) {
  auto r = call("GET", "/v2/sandboxes", "", std::nullopt);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(body(r)["code"], 401);
  EXPECT_EQ(call("GET", "/v2/sandboxes", "", "wrong").status, 401);
}

TEST_F(ControlPlaneTest, CreateUsesTheKeysProfileAndOwner) {
  auto r = call(
      "POST", "/v2/sandboxes",
      R"({"templateID":"base","timeout":60,"metadata":{"u":"1"},"envVars":{"A":"b"},)"
      R"("network":{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"]},"autoPause":true})");
  ASSERT_EQ(r.status, 201) << r.body;
  auto j = body(r);
  EXPECT_EQ(j["envdVersion"], "0.6.13");
  EXPECT_EQ(j["envdAccessToken"], "tok-" + j["sandboxID"].get<std::string>());
  EXPECT_TRUE(j["sandboxID"].is_string());
  EXPECT_TRUE(j["clientID"].is_string());
  EXPECT_EQ(svc->last_spec.profile, "profile-a");
  EXPECT_EQ(svc->last_spec.owner, "ida");
  EXPECT_EQ(svc->last_spec.timeout.count(), 60);
  EXPECT_EQ(svc->last_spec.env_vars.at("A"), "b");
  EXPECT_EQ(svc->last_spec.network.allow_out, std::vector<std::string>{"api.example.com"});
  EXPECT_EQ(svc->last_spec.on_timeout, sandbox::TimeoutAction::kPause);
  // v1 route too
  EXPECT_EQ(call("POST", "/sandboxes", R"({"templateID":"base"})").status, 201);
}

TEST_F(ControlPlaneTest, CreateErrors) {
  auto r = call("POST", "/v2/sandboxes", "{not json");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(body(r)["code"], 400);
  EXPECT_NE(body(r)["message"].get<std::string>().find("JSON"), std::string::npos);
  r = call("POST", "/v2/sandboxes",
           R"({"templateID":"base","network":{"denyOut":["10.0.0.0/8"]}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("network.denyOut[0]"), std::string::npos) << r.body;
  EXPECT_EQ(call("POST", "/v2/sandboxes", R"({"templateID":"missing"})").status, 404);
  // A security field cordon does not carry out makes nothing: 400 naming it.
  size_t before = svc->records.size();
  r = call("POST", "/v2/sandboxes",
           R"({"templateID":"base","network":{"egressProxy":{"address":"p.example:1080"}}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("network.egressProxy"), std::string::npos) << r.body;
  EXPECT_EQ(svc->records.size(), before);
  svc->capacity = 0;
  r = call("POST", "/v2/sandboxes", R"({"templateID":"base"})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(header(r, "Retry-After"), "1");
  EXPECT_EQ(body(r)["code"], 429);
}

TEST_F(ControlPlaneTest, OwnershipHidesOtherKeysSandboxes) {
  std::string a = create("key-a");
  std::string b = create("key-b");
  EXPECT_EQ(call("GET", "/sandboxes/" + a).status, 200);
  for (auto [m, path] : std::vector<std::pair<std::string, std::string>>{{"GET", ""},
                                                                         {"DELETE", ""},
                                                                         {"POST", "/pause"},
                                                                         {"POST", "/timeout"},
                                                                         {"POST", "/connect"},
                                                                         {"GET", "/metrics"},
                                                                         {"PUT", "/network"}}) {
    auto r = call(m, "/sandboxes/" + b + path, R"({"timeout":5})");
    EXPECT_EQ(r.status, 404) << m << path;
    EXPECT_EQ(body(r)["code"], 404);
  }
  EXPECT_EQ(svc->records.size(), 2u);  // b was not killed
  auto list = body(call("GET", "/v2/sandboxes"));
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["sandboxID"], a);
}

TEST_F(ControlPlaneTest, Lifecycle) {
  std::string id = create();
  auto info = call("GET", "/sandboxes/" + id);
  ASSERT_EQ(info.status, 200);
  EXPECT_EQ(body(info)["state"], "running");
  EXPECT_EQ(body(info)["envdAccessToken"], "tok-" + id);
  EXPECT_EQ(call("POST", "/sandboxes/" + id + "/timeout", R"({"timeout":120})").status, 204);
  EXPECT_EQ(svc->last_timeout.count(), 120);
  EXPECT_EQ(call("POST", "/sandboxes/" + id + "/timeout", R"({})").status, 400);
  EXPECT_EQ(call("POST", "/v2/sandboxes/" + id + "/connect", "{}").status, 200);
  // A file-system-only pause is not carried out: refused by name, the sandbox still runs.
  auto fs_only = call("POST", "/sandboxes/" + id + "/pause", R"({"memory":false})");
  EXPECT_EQ(fs_only.status, 400);
  EXPECT_NE(body(fs_only)["message"].get<std::string>().find("memory"), std::string::npos);
  EXPECT_EQ(body(call("GET", "/sandboxes/" + id))["state"], "running");
  EXPECT_EQ(call("POST", "/sandboxes/" + id + "/pause", "{}").status, 204);
  auto again = call("POST", "/sandboxes/" + id + "/pause", "{}");
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(body(again)["code"], 409);
  auto m = call("GET", "/sandboxes/" + id + "/metrics?start=1&end=2");
  EXPECT_EQ(body(m).size(), 0u);  // paused: no sample
  auto c = call("POST", "/v2/sandboxes/" + id + "/connect", R"({"timeout":30})");
  EXPECT_EQ(c.status, 201);
  EXPECT_EQ(body(c)["sandboxID"], id);
  EXPECT_EQ(svc->last_timeout.count(), 30);
  m = call("GET", "/sandboxes/" + id + "/metrics");
  ASSERT_EQ(body(m).size(), 1u);
  EXPECT_EQ(body(m)[0]["cpuUsedPct"], 12.5);
  EXPECT_EQ(call("PUT", "/sandboxes/" + id + "/network", R"({"denyOut":["0.0.0.0/0"]})").status,
            204);
  EXPECT_EQ(svc->records[id].network.deny_out[0], "0.0.0.0/0");
  EXPECT_EQ(call("PUT", "/sandboxes/" + id + "/network", R"({"denyOut":["1.1.1.1"]})").status, 400);
  EXPECT_EQ(call("DELETE", "/sandboxes/" + id).status, 204);
  auto gone = call("DELETE", "/sandboxes/" + id);
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(body(gone)["code"], 404);
  EXPECT_EQ(body(call("POST", "/v2/sandboxes/" + id + "/connect", "{}"))["code"], 404);
}

TEST_F(ControlPlaneTest, BadIdsAndRoutes) {
  EXPECT_EQ(call("GET", "/sandboxes/..%2f").status, 404);
  EXPECT_EQ(call("GET", "/sandboxes/UPPER").status, 404);
  EXPECT_EQ(body(call("GET", "/sandboxes/nosuchsandbox"))["code"], 404);
  EXPECT_EQ(call("POST", "/sandboxes/abc/frobnicate").status, 404);
  EXPECT_EQ(call("PATCH", "/sandboxes").status, 405);
  EXPECT_EQ(call("GET", "/templates").status, 404);
}

TEST_F(ControlPlaneTest, ListFiltersAndPaging) {
  for (int i = 0; i < 5; ++i) create("key-a", R"(,"metadata":{"n":")" + std::to_string(i) + "\"}");
  auto ids = svc->list();
  (void)svc->pause(ids[0].id);
  EXPECT_EQ(body(call("GET", "/v2/sandboxes?state=paused")).size(), 1u);
  EXPECT_EQ(body(call("GET", "/v2/sandboxes?state=running")).size(), 4u);
  EXPECT_EQ(body(call("GET", "/v2/sandboxes?state=running,paused")).size(), 5u);
  auto one = body(call("GET", "/v2/sandboxes?metadata=n%3D3"));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0]["metadata"]["n"], "3");
  std::set<std::string> seen;
  std::string token;
  for (int page = 0; page < 5; ++page) {
    auto r = call("GET", "/v2/sandboxes?limit=2" + (token.empty() ? "" : "&nextToken=" + token));
    ASSERT_EQ(r.status, 200) << r.body;
    for (auto& s : body(r)) seen.insert(s["sandboxID"]);
    token = header(r, "X-Next-Token");
    if (token.empty()) break;
  }
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(call("GET", "/v2/sandboxes?nextToken=%21%21").status, 400);
}

}  // namespace
}  // namespace cordon::e2b
