#include "ca/ca.h"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "ca/ca_test_util.h"
#include "ca/limits.h"
#include "common/file_io.h"

namespace cordon::ca {
namespace {

using test::TempDir;
using test::verify_leaf;

TEST(Authority, CreateWritesPrivateFilesAndLoadReadsThem) {
  TempDir dir;
  StateDir state{dir.path()};
  auto created = Authority::create(state, false);
  ASSERT_TRUE(created) << created.error().message;
  struct stat st;
  ASSERT_EQ(stat(state.ca_key().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(state.leaf_key().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(state.ca_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  auto loaded = Authority::load(state);
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ((*loaded)->root_pem(), (*created)->root_pem());
  EXPECT_EQ((*loaded)->root_pem(), *read_file(state.ca_cert()));
  EXPECT_EQ(EVP_PKEY_eq((*loaded)->leaf_key().get(), (*created)->leaf_key().get()), 1);
  // A leaf minted by the loaded CA verifies against the root that create() wrote.
  auto leaf = (*loaded)->mint("example.com");
  ASSERT_TRUE(leaf);
  EXPECT_EQ(verify_leaf((*created)->root_cert().get(), leaf->cert.get(), "example.com"), X509_V_OK);
}

TEST(Authority, RootIsAConstrainedP256Ca) {
  TempDir dir;
  auto ca = Authority::create(StateDir{dir.path()}, false);
  ASSERT_TRUE(ca);
  X509* root = (*ca)->root_cert().get();
  EXPECT_EQ(X509_check_ca(root), 1);
  EXPECT_EQ(X509_get_key_usage(root), uint32_t(KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  int crit = -1;
  auto* bc = static_cast<BASIC_CONSTRAINTS*>(
      X509_get_ext_d2i(root, NID_basic_constraints, &crit, nullptr));
  ASSERT_NE(bc, nullptr);
  EXPECT_EQ(crit, 1);
  EXPECT_TRUE(bc->ca);
  BASIC_CONSTRAINTS_free(bc);
  EVP_PKEY* pub = X509_get0_pubkey(root);
  ASSERT_NE(pub, nullptr);
  EXPECT_EQ(EVP_PKEY_get_base_id(pub), EVP_PKEY_EC);
  char group[64];
  size_t len = 0;
  ASSERT_EQ(EVP_PKEY_get_group_name(pub, group, sizeof group, &len), 1);
  EXPECT_STREQ(group, "prime256v1");
  EXPECT_EQ(X509_verify(root, pub), 1);  // self-signed
  EXPECT_EQ((*ca)->root_pem().rfind("-----BEGIN CERTIFICATE-----", 0), 0u);
}

TEST(Authority, RefusesToOverwriteWithoutForce) {
  TempDir dir;
  StateDir state{dir.path()};
  auto first = Authority::create(state, false);
  ASSERT_TRUE(first);
  auto second = Authority::create(state, false);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, int(CaError::kExists));
  EXPECT_NE(second.error().message.find("--force"), std::string::npos);
  EXPECT_EQ(*read_file(state.ca_cert()), (*first)->root_pem());  // untouched

  auto forced = Authority::create(state, true);
  ASSERT_TRUE(forced) << forced.error().message;
  EXPECT_NE((*forced)->root_pem(), (*first)->root_pem());
  EXPECT_EQ(*read_file(state.ca_cert()), (*forced)->root_pem());
}

TEST(Authority, RefusesOverwriteWhenOnlyOneFileExists) {
  TempDir dir;
  StateDir state{dir.path()};
  ASSERT_TRUE(ensure_directory(state.ca_dir(), 0700));
  ASSERT_TRUE(write_file_atomic(state.leaf_key(), "x", 0600));
  EXPECT_FALSE(Authority::create(state, false));
}

TEST(Authority, LoadRefusesKeyReadableByOthers) {
  TempDir dir;
  StateDir state{dir.path()};
  ASSERT_TRUE(Authority::create(state, false));
  ASSERT_EQ(chmod(state.ca_key().c_str(), 0640), 0);
  auto r = Authority::load(state);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("0640"), std::string::npos) << r.error().message;
  ASSERT_EQ(chmod(state.ca_key().c_str(), 0600), 0);
  ASSERT_EQ(chmod(state.leaf_key().c_str(), 0604), 0);
  r = Authority::load(state);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(state.leaf_key()), std::string::npos) << r.error().message;
  ASSERT_EQ(chmod(state.leaf_key().c_str(), 0600), 0);
  EXPECT_TRUE(Authority::load(state));
}

TEST(Authority, LoadRefusesKeyThatDoesNotMatchTheRoot) {
  TempDir a, b;
  StateDir sa{a.path()}, sb{b.path()};
  ASSERT_TRUE(Authority::create(sa, false));
  ASSERT_TRUE(Authority::create(sb, false));
  ASSERT_TRUE(write_file_atomic(sa.ca_key(), *read_file(sb.ca_key()), 0600));
  auto r = Authority::load(sa);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("does not match"), std::string::npos) << r.error().message;
}

TEST(Authority, LoadReportsMissingCa) {
  TempDir dir;
  auto r = Authority::load(StateDir{dir.path()});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, int(CaError::kMissing));
  EXPECT_NE(r.error().message.find("cordon ca init"), std::string::npos);
}

TEST(Authority, LoadRefusesGarbage) {
  TempDir dir;
  StateDir state{dir.path()};
  ASSERT_TRUE(Authority::create(state, false));
  ASSERT_TRUE(write_file_atomic(state.ca_cert(), "not a certificate", 0644));
  EXPECT_FALSE(Authority::load(state));
}

class Minting : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = Authority::create(StateDir{dir_.path()}, false);
    ASSERT_TRUE(ca) << ca.error().message;
    ca_ = *ca;
  }
  X509* root() { return ca_->root_cert().get(); }
  TempDir dir_;
  std::shared_ptr<const Authority> ca_;
};

TEST_F(Minting, LeafVerifiesForItsNameAndNotForAnother) {
  auto leaf = ca_->mint("api.github.com");
  ASSERT_TRUE(leaf) << leaf.error().message;
  EXPECT_EQ(verify_leaf(root(), leaf->cert.get(), "api.github.com"), X509_V_OK);
  EXPECT_EQ(verify_leaf(root(), leaf->cert.get(), "evil.example"), X509_V_ERR_HOSTNAME_MISMATCH);
  EXPECT_EQ(verify_leaf(root(), leaf->cert.get(), "x.api.github.com"),
            X509_V_ERR_HOSTNAME_MISMATCH);
  EXPECT_EQ(verify_leaf(root(), leaf->cert.get(), "github.com"), X509_V_ERR_HOSTNAME_MISMATCH);
  EXPECT_EQ(X509_check_private_key(leaf->cert.get(), ca_->leaf_key().get()), 1);
}

TEST_F(Minting, LeafFromAnotherCaDoesNotVerify) {
  TempDir other_dir;
  auto other = Authority::create(StateDir{other_dir.path()}, false);
  ASSERT_TRUE(other);
  auto leaf = (*other)->mint("api.github.com");
  ASSERT_TRUE(leaf);
  EXPECT_NE(verify_leaf(root(), leaf->cert.get(), "api.github.com"), X509_V_OK);
}

TEST_F(Minting, NamesAreLowerCased) {
  auto leaf = ca_->mint("API.GitHub.COM");
  ASSERT_TRUE(leaf);
  EXPECT_EQ(verify_leaf(root(), leaf->cert.get(), "api.github.com"), X509_V_OK);
  X509_NAME* subject = X509_get_subject_name(leaf->cert.get());
  char cn[256];
  ASSERT_GT(X509_NAME_get_text_by_NID(subject, NID_commonName, cn, sizeof cn), 0);
  EXPECT_STREQ(cn, "api.github.com");
}

TEST_F(Minting, IpAddressesGetAnIpSan) {
  auto leaf = ca_->mint("192.0.2.7");
  ASSERT_TRUE(leaf) << leaf.error().message;
  EXPECT_EQ(verify_leaf(root(), leaf->cert.get(), "192.0.2.7", /*ip=*/true), X509_V_OK);
  EXPECT_EQ(verify_leaf(root(), leaf->cert.get(), "192.0.2.8", true),
            X509_V_ERR_IP_ADDRESS_MISMATCH);
  // An IP SAN is not a DNS name (the CN holds the address too, for display only).
  EXPECT_EQ(X509_check_host(leaf->cert.get(), "192.0.2.7", 0, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT,
                            nullptr),
            0);

  auto v6 = ca_->mint("[2001:DB8:0::1]");
  ASSERT_TRUE(v6) << v6.error().message;
  EXPECT_EQ(verify_leaf(root(), v6->cert.get(), "2001:db8::1", true), X509_V_OK);
  EXPECT_EQ(verify_leaf(root(), v6->cert.get(), "2001:db8::2", true),
            X509_V_ERR_IP_ADDRESS_MISMATCH);
}

TEST_F(Minting, LeafHasShortBackdatedValidityAndServerAuth) {
  auto now = std::chrono::system_clock::now();
  auto leaf = ca_->mint("example.com", now);
  ASSERT_TRUE(leaf);
  EXPECT_LE(leaf->not_after - now, kMaxLeafValidityHours);
  EXPECT_LE(leaf->not_before, now - std::chrono::minutes(59));
  EXPECT_GE(leaf->not_before, now - std::chrono::minutes(61));
  // The certificate itself says so too: valid in an hour's past, invalid in eight days.
  time_t t = std::chrono::system_clock::to_time_t(now);
  EXPECT_EQ(ASN1_TIME_cmp_time_t(X509_get0_notBefore(leaf->cert.get()), t - 3500), -1);
  EXPECT_EQ(ASN1_TIME_cmp_time_t(X509_get0_notAfter(leaf->cert.get()), t + 8 * 86400), -1);
  EXPECT_EQ(verify_leaf(root(), leaf->cert.get(), "example.com", false, t - 3500), X509_V_OK);
  EXPECT_EQ(verify_leaf(root(), leaf->cert.get(), "example.com", false, t + 8 * 86400),
            X509_V_ERR_CERT_HAS_EXPIRED);

  EXPECT_TRUE(X509_get_extension_flags(leaf->cert.get()) & EXFLAG_XKUSAGE);
  EXPECT_EQ(X509_get_extended_key_usage(leaf->cert.get()), uint32_t(XKU_SSL_SERVER));
  EXPECT_EQ(X509_check_ca(leaf->cert.get()), 0);
  const ASN1_OCTET_STRING* aki = X509_get0_authority_key_id(leaf->cert.get());
  const ASN1_OCTET_STRING* root_ski = X509_get0_subject_key_id(root());
  ASSERT_NE(aki, nullptr);
  ASSERT_NE(root_ski, nullptr);
  EXPECT_EQ(ASN1_OCTET_STRING_cmp(aki, root_ski), 0);
  EXPECT_NE(X509_get0_subject_key_id(leaf->cert.get()), nullptr);
}

TEST_F(Minting, ValidityOptionIsClampedToSevenDays) {
  TempDir d;
  StateDir s{d.path()};
  ASSERT_TRUE(Authority::create(s, false));
  auto ca = Authority::load(s, AuthorityOptions{std::chrono::hours(24 * 30)});
  ASSERT_TRUE(ca);
  auto now = std::chrono::system_clock::now();
  auto leaf = (*ca)->mint("example.com", now);
  ASSERT_TRUE(leaf);
  EXPECT_LE(leaf->not_after - now, kMaxLeafValidityHours);
  auto shorter = Authority::load(s, AuthorityOptions{std::chrono::hours(2)});
  ASSERT_TRUE(shorter);
  auto short_leaf = (*shorter)->mint("example.com", now);
  ASSERT_TRUE(short_leaf);
  EXPECT_LE(short_leaf->not_after - now, std::chrono::hours(2));
}

TEST_F(Minting, SerialsArePositiveRandomAndAtMost128Bits) {
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    auto leaf = ca_->mint("example.com");
    ASSERT_TRUE(leaf);
    const ASN1_INTEGER* serial = X509_get0_serialNumber(leaf->cert.get());
    BIGNUM* bn = ASN1_INTEGER_to_BN(serial, nullptr);
    ASSERT_NE(bn, nullptr);
    EXPECT_FALSE(BN_is_negative(bn));
    EXPECT_FALSE(BN_is_zero(bn));
    EXPECT_LE(BN_num_bits(bn), 128);
    char* hex = BN_bn2hex(bn);
    seen.insert(hex);
    OPENSSL_free(hex);
    BN_free(bn);
  }
  EXPECT_EQ(seen.size(), 50u);
}

TEST_F(Minting, LongNamesGoInTheSanOnly) {
  std::string name = std::string(63, 'a') + "." + std::string(63, 'b') + ".example.com";
  auto leaf = ca_->mint(name);
  ASSERT_TRUE(leaf) << leaf.error().message;
  EXPECT_EQ(verify_leaf(root(), leaf->cert.get(), name), X509_V_OK);
}

struct BadName {
  std::string name;
  std::string why;
};

TEST(LeafNames, InvalidNamesAreRefused) {
  const BadName cases[] = {
      {"", "empty"},
      {std::string(254, 'a'), "over 253 bytes"},
      {std::string(64, 'a') + ".com", "label over 63"},
      {"*.example.com", "wildcard"},
      {"exa mple.com", "space"},
      {"example.com.", "trailing dot (empty label)"},
      {".example.com", "leading dot"},
      {"a..b.com", "empty label"},
      {"-a.example.com", "leading hyphen"},
      {"a-.example.com", "trailing hyphen"},
      {"example.com\n", "newline"},
      {std::string("192.0.2.1\0x", 11), "NUL after an IP"},
      {std::string("exa\0mple.com", 12), "NUL"},
      {"exämple.com", "non-ASCII (IDN must be punycode)"},
      {"1.2.3.999", "numeric last label, not an IP"},
      {"10.1", "short IPv4 form"},
      {"0x7f.0.0.1", "hex IPv4 form"},
      {"[::1", "unbalanced bracket"},
      {"2001:db8::g", "bad IPv6"},
      {"example.com:443", "port"},
      {"example.com/", "slash"},
  };
  for (const auto& c : cases) {
    auto r = validate_leaf_name(c.name);
    EXPECT_FALSE(r) << c.why;
  }
  TempDir dir;
  auto ca = Authority::create(StateDir{dir.path()}, false);
  ASSERT_TRUE(ca);
  auto r = (*ca)->mint("*.example.com");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, int(CaError::kBadName));
  EXPECT_NE(r.error().message.find("wildcard"), std::string::npos);
}

TEST(LeafNames, ValidNamesAreNormalized) {
  EXPECT_EQ(validate_leaf_name("Example.COM")->text, "example.com");
  EXPECT_FALSE(validate_leaf_name("Example.COM")->is_ip);
  EXPECT_EQ(validate_leaf_name("xn--bcher-kva.example")->text, "xn--bcher-kva.example");
  EXPECT_EQ(validate_leaf_name("localhost")->text, "localhost");
  EXPECT_EQ(validate_leaf_name("a-b.c0")->text, "a-b.c0");
  // '_' is a label byte in the one host-name grammar (common/host_name.h): a name the policy
  // lets through gets its leaf.
  EXPECT_EQ(validate_leaf_name("Ex_Ample.com")->text, "ex_ample.com");
  EXPECT_EQ(validate_leaf_name("_dmarc.example.com")->text, "_dmarc.example.com");
  std::string max_name;
  while (max_name.size() + 64 <= 253) max_name += std::string(63, 'a') + ".";
  max_name += std::string(253 - max_name.size(), 'b');
  ASSERT_EQ(max_name.size(), 253u);
  EXPECT_TRUE(validate_leaf_name(max_name));
  auto ip = validate_leaf_name("192.0.2.1");
  ASSERT_TRUE(ip);
  EXPECT_TRUE(ip->is_ip);
  EXPECT_EQ(validate_leaf_name("2001:DB8:0:0::1")->text, "2001:db8::1");
  EXPECT_EQ(validate_leaf_name("[2001:db8::1]")->text, "2001:db8::1");
}

}  // namespace
}  // namespace cordon::ca
