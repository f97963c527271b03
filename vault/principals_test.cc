// API keys and sandbox registrations.
#include <gtest/gtest.h>

#include "common/crypto.h"
#include "vault/detail/test_support.h"
#include "vault/vault.h"

namespace cordon::vault {
namespace {

using testing::VaultTest;

TEST_F(VaultTest, ApiKeysVerifyToTheirProfileUntilRevoked) {
  auto k = vault_->create_api_key("default", "ci runner");
  ASSERT_TRUE(k) << k.error().message;
  std::string key(k->key.view());
  EXPECT_TRUE(testing::has_id_secret_shape(key, "cak")) << key;
  auto g = vault_->verify_api_key(key);
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(g->profile, "default");
  EXPECT_EQ(g->id, k->id);
  EXPECT_EQ(testing::database_bytes(state()).find(key.substr(21)), std::string::npos);

  auto other = vault_->create_api_key("strict", "");
  ASSERT_TRUE(other);
  EXPECT_EQ(vault_->verify_api_key(other->key.view())->profile, "strict");

  for (std::string bad :
       {std::string(""), std::string("e2b_123"), key.substr(0, 21) + std::string(43, 'A'),
        "cak_0000000000000000_" + key.substr(21), key + "x"}) {
    auto r = vault_->verify_api_key(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, code(ErrorCode::kRefused));
  }
  auto list = vault_->list_api_keys();
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_FALSE((*list)[0].revoked);

  ASSERT_TRUE(vault_->revoke_api_key(k->id));
  auto r = vault_->verify_api_key(key);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("revoked"), std::string::npos);
  EXPECT_TRUE(vault_->verify_api_key(other->key.view()));
  EXPECT_EQ(vault_->revoke_api_key("0000000000000000").error().code, code(ErrorCode::kNotFound));
  EXPECT_FALSE(vault_->create_api_key("bad profile", ""));
}

TEST_F(VaultTest, SandboxesRegisterLookUpVerifyAndUnregister) {
  auto a = vault_->register_sandbox("sbx-a", "default", "10.200.0.2");
  ASSERT_TRUE(a) << a.error().message;
  std::string secret(a->proxy_secret.view());
  EXPECT_TRUE(secret.size() == 47 && secret.rfind("cps_", 0) == 0 &&
              testing::all_of_class(secret.substr(4), false))
      << secret;
  EXPECT_EQ(testing::database_bytes(state()).find(secret), std::string::npos);
  auto b = vault_->register_sandbox("sbx-b", "strict", std::nullopt);
  ASSERT_TRUE(b);

  auto found = vault_->sandbox_by_address("10.200.0.2");
  ASSERT_TRUE(found);
  ASSERT_TRUE(*found);
  EXPECT_EQ((*found)->id, "sbx-a");
  EXPECT_EQ((*found)->profile, "default");
  // v4-mapped v6 (a dual-stack listener's view of the same peer).
  auto mapped = vault_->sandbox_by_address("::ffff:10.200.0.2");
  ASSERT_TRUE(mapped && *mapped);
  EXPECT_EQ((*mapped)->id, "sbx-a");
  EXPECT_FALSE(*vault_->sandbox_by_address("10.200.0.3"));
  EXPECT_FALSE(vault_->sandbox_by_address("not-an-ip"));

  auto v = vault_->verify_sandbox("sbx-a", secret);
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(v->profile, "default");
  EXPECT_EQ(vault_->verify_sandbox("sbx-b", secret).error().code, code(ErrorCode::kRefused));
  EXPECT_EQ(vault_->verify_sandbox("sbx-a", secret + "x").error().code, code(ErrorCode::kRefused));
  EXPECT_EQ(vault_->verify_sandbox("nobody", secret).error().code, code(ErrorCode::kRefused));
  EXPECT_EQ(vault_->verify_sandbox("BAD ID", secret).error().code, code(ErrorCode::kRefused));

  auto list = *vault_->list_sandboxes();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, "sbx-a");
  EXPECT_EQ(list[0].address, "10.200.0.2");
  EXPECT_FALSE(list[1].address);

  ASSERT_TRUE(vault_->unregister_sandbox("sbx-a"));
  EXPECT_FALSE(*vault_->sandbox_by_address("10.200.0.2"));
  EXPECT_FALSE(vault_->verify_sandbox("sbx-a", secret));
  EXPECT_EQ(vault_->unregister_sandbox("sbx-a").error().code, code(ErrorCode::kNotFound));
  // The address is free again.
  EXPECT_TRUE(vault_->register_sandbox("sbx-c", "default", "10.200.0.2"));
}

TEST_F(VaultTest, SandboxIdsAndAddressesAreUniqueAndValidated) {
  ASSERT_TRUE(vault_->register_sandbox("sbx-a", "default", "2001:db8::1"));
  auto dup_id = vault_->register_sandbox("sbx-a", "default", std::nullopt);
  ASSERT_FALSE(dup_id);
  EXPECT_EQ(dup_id.error().code, code(ErrorCode::kExists));
  // The same v6 address written differently is the same address.
  auto dup_addr = vault_->register_sandbox("sbx-b", "default", "2001:0db8:0:0::0001");
  ASSERT_FALSE(dup_addr);
  EXPECT_EQ(dup_addr.error().code, code(ErrorCode::kExists));
  EXPECT_NE(dup_addr.error().message.find("sbx-a"), std::string::npos);

  for (const char* bad_id : {"", "-lead", "trail-", "Upper", "under_score", "dot.ted", "sp ace"})
    EXPECT_FALSE(vault_->register_sandbox(bad_id, "default", std::nullopt)) << bad_id;
  EXPECT_FALSE(vault_->register_sandbox(std::string(64, 'a'), "default", std::nullopt));
  EXPECT_TRUE(vault_->register_sandbox(std::string(63, 'a'), "default", std::nullopt));
  for (const char* bad_ip : {"", "10.0.0", "10.0.0.256", "fe80::1%eth0", "1.2.3.4 ", "host", "::g"})
    EXPECT_FALSE(vault_->register_sandbox("sbx-x", "default", std::string_view(bad_ip))) << bad_ip;
}

TEST(CanonicalIp, NormalizesV4V6AndMapped) {
  EXPECT_EQ(*canonical_ip("192.0.2.1"), "192.0.2.1");
  EXPECT_EQ(*canonical_ip("2001:DB8:0::1"), "2001:db8::1");
  EXPECT_EQ(*canonical_ip("::ffff:192.0.2.1"), "192.0.2.1");
  EXPECT_EQ(*canonical_ip("::1"), "::1");
  EXPECT_FALSE(canonical_ip("01.2.3.4"));
  EXPECT_FALSE(canonical_ip(std::string(100, '1')));
}

}  // namespace
}  // namespace cordon::vault
