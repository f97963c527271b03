#include "e2b/network.h"

#include <gtest/gtest.h>

namespace cordon::e2b {
namespace {

std::shared_ptr<const NetworkFilter> filter(std::vector<std::string> allow,
                                            std::vector<std::string> deny, bool internet = true) {
  sandbox::NetworkOverlay n;
  n.allow_out = std::move(allow);
  n.deny_out = std::move(deny);
  n.internet = internet;
  auto f = NetworkFilter::compile(n);
  EXPECT_TRUE(f) << f.error().message;
  return *f;
}

TEST(Network, NoSettingsNarrowNothing) {
  auto f = filter({}, {});
  EXPECT_TRUE(f->open());
  EXPECT_TRUE(f->permits("api.example.com"));
}

TEST(Network, InternetOffRefusesEverything) {
  auto f = filter({"api.example.com"}, {}, false);
  EXPECT_FALSE(f->permits("api.example.com"));
  EXPECT_FALSE(f->open());
}

TEST(Network, DenyAllWithAllowExceptions) {
  auto f = filter({"api.example.com", "*.pkg.dev"}, {"0.0.0.0/0"});
  EXPECT_TRUE(f->permits("api.example.com"));
  EXPECT_TRUE(f->permits("API.Example.com."));
  EXPECT_TRUE(f->permits("x.pkg.dev"));
  EXPECT_FALSE(f->permits("pkg.dev"));
  EXPECT_FALSE(f->permits("other.example.com"));
}

TEST(Network, AllowOutTakesPrecedenceOverDenyOut) {
  auto f = filter({"a.example.com"}, {"**.example.com"});
  EXPECT_TRUE(f->permits("a.example.com"));
  EXPECT_FALSE(f->permits("b.example.com"));
  EXPECT_TRUE(f->permits("example.org"));
}

TEST(Network, AllowOutAloneRestrictsNothing) {
  auto f = filter({"a.example.com"}, {});
  EXPECT_TRUE(f->permits("b.example.com"));
}

TEST(Network, OverlayFromJsonNamesTheBadEntry) {
  auto j =
      nlohmann::json::parse(R"({"allowOut":["ok.example.com"],"denyOut":["0.0.0.0/0","1.2.3.4"]})");
  auto n = network_overlay(&j, std::nullopt);
  ASSERT_FALSE(n);
  EXPECT_NE(n.error().message.find("network.denyOut[1] '1.2.3.4'"), std::string::npos)
      << n.error().message;
  auto wide = nlohmann::json::parse(R"({"allowOut":["0.0.0.0/0"]})");
  EXPECT_FALSE(network_overlay(&wide, std::nullopt));
  auto notlist = nlohmann::json::parse(R"({"allowOut":"a.com"})");
  EXPECT_FALSE(network_overlay(&notlist, std::nullopt));
  auto ok = nlohmann::json::parse(R"({"denyOut":["::/0"],"allowPublicTraffic":true})");
  auto o = network_overlay(&ok, false);
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->internet);
  EXPECT_EQ(o->deny_out[0], "::/0");
  EXPECT_TRUE(network_overlay(nullptr, std::nullopt)->internet);
}

}  // namespace
}  // namespace cordon::e2b
