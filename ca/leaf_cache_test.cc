#include "ca/leaf_cache.h"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <thread>
#include <vector>

#include "ca/ca_test_util.h"

namespace cordon::ca {
namespace {

using test::TempDir;
using test::verify_leaf;

class LeafCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = Authority::create(StateDir{dir_.path()}, false);
    ASSERT_TRUE(ca) << ca.error().message;
    ca_ = *ca;
  }
  TempDir dir_;
  std::shared_ptr<const Authority> ca_;
};

TEST_F(LeafCacheTest, SecondGetIsAHitWithTheSameCert) {
  LeafCertCache cache(ca_);
  auto a = cache.get("Example.com");
  ASSERT_TRUE(a) << a.error().message;
  auto b = cache.get("example.COM");
  ASSERT_TRUE(b);
  EXPECT_EQ(a->cert.get(), b->cert.get());
  EXPECT_EQ(a->key.get(), ca_->leaf_key().get());
  EXPECT_EQ(a->root.get(), ca_->root_cert().get());
  EXPECT_EQ(verify_leaf(a->root.get(), a->cert.get(), "example.com"), X509_V_OK);
  auto s = cache.stats();
  EXPECT_EQ(s.mints, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.entries, 1u);
}

TEST_F(LeafCacheTest, EvictsLeastRecentlyUsed) {
  LeafCertCache cache(ca_, LeafCacheOptions{.capacity = 2});
  auto a = cache.get("a.example");
  ASSERT_TRUE(a);
  ASSERT_TRUE(cache.get("b.example"));
  ASSERT_TRUE(cache.get("a.example"));  // a is now more recent than b
  ASSERT_TRUE(cache.get("c.example"));  // evicts b
  auto s = cache.stats();
  EXPECT_EQ(s.mints, 3u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.entries, 2u);
  auto a2 = cache.get("a.example");
  ASSERT_TRUE(a2);
  EXPECT_EQ(a2->cert.get(), a->cert.get());  // still cached
  EXPECT_EQ(cache.stats().mints, 3u);
  ASSERT_TRUE(cache.get("b.example"));  // was evicted: minted again
  EXPECT_EQ(cache.stats().mints, 4u);
  // The evicted leaf stays usable by whoever still holds it.
  EXPECT_EQ(verify_leaf(ca_->root_cert().get(), a->cert.get(), "a.example"), X509_V_OK);
}

TEST_F(LeafCacheTest, RenewsWithinTheExpiryMargin) {
  auto now = std::chrono::system_clock::now();
  std::atomic<int64_t> offset_s{0};
  LeafCacheOptions options;
  options.renew_margin = std::chrono::hours(24);
  options.clock = [&] { return now + std::chrono::seconds(offset_s.load()); };
  LeafCertCache cache(ca_, options);
  auto first = cache.get("example.com");
  ASSERT_TRUE(first);
  offset_s = 5 * 86400;  // 2 days left: outside the margin
  auto second = cache.get("example.com");
  ASSERT_TRUE(second);
  EXPECT_EQ(first->cert.get(), second->cert.get());
  offset_s = 6 * 86400 + 3600;  // 23 hours left: inside the margin
  auto third = cache.get("example.com");
  ASSERT_TRUE(third);
  EXPECT_NE(first->cert.get(), third->cert.get());
  EXPECT_GT(third->not_after, first->not_after);
  auto s = cache.stats();
  EXPECT_EQ(s.mints, 2u);
  EXPECT_EQ(s.renewals, 1u);
  EXPECT_EQ(s.entries, 1u);
}

TEST_F(LeafCacheTest, MintRateLimitRefusesBeyondTheBurst) {
  LeafCacheOptions options;
  options.mints_per_second = 0.5;
  options.mint_burst = 2;
  LeafCertCache cache(ca_, options);
  ASSERT_TRUE(cache.get("a.example"));
  ASSERT_TRUE(cache.get("b.example"));
  auto c = cache.get("c.example");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, int(CaError::kRateLimited));
  EXPECT_TRUE(cache.get("a.example"));  // hits need no token
  auto s = cache.stats();
  EXPECT_EQ(s.mints, 2u);
  EXPECT_EQ(s.rate_limited, 1u);
}

TEST_F(LeafCacheTest, RateLimitedRenewalServesTheStillValidLeaf) {
  auto now = std::chrono::system_clock::now();
  std::atomic<int64_t> offset_s{0};
  LeafCacheOptions options;
  options.mints_per_second = 0.001;
  options.mint_burst = 1;
  options.clock = [&] { return now + std::chrono::seconds(offset_s.load()); };
  LeafCertCache cache(ca_, options);
  auto first = cache.get("example.com");
  ASSERT_TRUE(first);
  offset_s = 6 * 86400 + 3600;  // within the margin, still valid
  auto second = cache.get("example.com");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->cert.get(), first->cert.get());
  offset_s = 8 * 86400;  // expired: nothing to serve
  auto third = cache.get("example.com");
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().code, int(CaError::kRateLimited));
}

TEST_F(LeafCacheTest, InvalidNamesAreRefusedAndCounted) {
  LeafCertCache cache(ca_);
  auto r = cache.get("*.example.com");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, int(CaError::kBadName));
  EXPECT_FALSE(cache.get(""));
  EXPECT_EQ(cache.stats().failures, 2u);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST_F(LeafCacheTest, ConcurrentGetsMintEachNameOnceAndReturnTheRightLeaf) {
  LeafCertCache cache(ca_, LeafCacheOptions{.capacity = 64});
  constexpr int kThreads = 8, kNames = 16, kRounds = 60;
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        // Half the threads share one hot name; all walk the same set in different orders.
        std::string name = (t % 2 == 0 && i % 3 == 0)
                               ? "hot.example"
                               : "n" + std::to_string((i * 7 + t) % kNames) + ".example";
        auto leaf = cache.get(name);
        if (!leaf) {
          ++errors;
          continue;
        }
        if (X509_check_host(leaf->cert.get(), name.c_str(), name.size(), 0, nullptr) != 1) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  auto s = cache.stats();
  EXPECT_EQ(s.mints, uint64_t(kNames + 1));  // single flight: one mint per name
  EXPECT_EQ(s.mints + s.hits, uint64_t(kThreads * kRounds));
}

TEST_F(LeafCacheTest, ConcurrentGetsWithEvictionStayConsistent) {
  LeafCertCache cache(ca_, LeafCacheOptions{.capacity = 3});
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        std::string name = "e" + std::to_string((i + t) % 7) + ".example";
        auto leaf = cache.get(name);
        if (!leaf || X509_check_host(leaf->cert.get(), name.c_str(), 0, 0, nullptr) != 1) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache.stats().entries, 3u);
  EXPECT_GT(cache.stats().evictions, 0u);
}

// The way the gateway uses the cache: an SNI callback hands the minted leaf to OpenSSL, and a
// client that trusts only the cordon root completes the handshake for that name.
struct Handshake {
  LeafCertCache* cache;
  std::string served_name;
};

int servername_cb(SSL* ssl, int* alert, void* arg) {
  auto* h = static_cast<Handshake*>(arg);
  const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (!sni) {
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  auto leaf = h->cache->get(sni);
  if (!leaf) {
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  if (SSL_use_certificate(ssl, leaf->cert.get()) != 1 ||
      SSL_use_PrivateKey(ssl, leaf->key.get()) != 1 ||
      SSL_add1_chain_cert(ssl, leaf->root.get()) != 1) {
    *alert = SSL_AD_INTERNAL_ERROR;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  h->served_name = sni;
  return SSL_TLSEXT_ERR_OK;
}

// Runs a TLS handshake in memory; returns the client's verify result, or -1 on handshake failure.
long run_handshake(LeafCertCache& cache, X509* trusted_root, const std::string& sni,
                   const std::string& expect_host) {
  SSL_CTX* server_ctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX* client_ctx = SSL_CTX_new(TLS_client_method());
  Handshake h{&cache, ""};
  SSL_CTX_set_tlsext_servername_callback(server_ctx, servername_cb);
  SSL_CTX_set_tlsext_servername_arg(server_ctx, &h);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(client_ctx), trusted_root);
  SSL_CTX_set_verify(client_ctx, SSL_VERIFY_PEER, nullptr);
  SSL* server = SSL_new(server_ctx);
  SSL* client = SSL_new(client_ctx);
  SSL_set_tlsext_host_name(client, sni.c_str());
  SSL_set1_host(client, expect_host.c_str());
  BIO *client_io, *server_io;
  BIO_new_bio_pair(&client_io, 0, &server_io, 0);
  SSL_set_bio(client, client_io, client_io);
  SSL_set_bio(server, server_io, server_io);
  SSL_set_connect_state(client);
  SSL_set_accept_state(server);
  bool client_done = false, server_done = false, failed = false;
  for (int i = 0; i < 100 && !(client_done && server_done) && !failed; ++i) {
    if (!client_done) {
      int r = SSL_do_handshake(client);
      if (r == 1)
        client_done = true;
      else if (SSL_get_error(client, r) != SSL_ERROR_WANT_READ)
        failed = true;
    }
    if (!server_done && !failed) {
      int r = SSL_do_handshake(server);
      if (r == 1)
        server_done = true;
      else if (SSL_get_error(server, r) != SSL_ERROR_WANT_READ)
        failed = true;
    }
  }
  long result = failed || !client_done ? -1 : SSL_get_verify_result(client);
  ERR_clear_error();
  SSL_free(client);
  SSL_free(server);
  SSL_CTX_free(client_ctx);
  SSL_CTX_free(server_ctx);
  return result;
}

TEST_F(LeafCacheTest, TlsHandshakeWithMintedLeafVerifiesAgainstTheRoot) {
  LeafCertCache cache(ca_);
  EXPECT_EQ(run_handshake(cache, ca_->root_cert().get(), "api.github.com", "api.github.com"),
            X509_V_OK);
  // Second handshake is served from the cache.
  EXPECT_EQ(run_handshake(cache, ca_->root_cert().get(), "api.github.com", "api.github.com"),
            X509_V_OK);
  EXPECT_EQ(cache.stats().mints, 1u);
  EXPECT_EQ(cache.stats().hits, 1u);
  // A client that expects another host rejects the leaf minted for the SNI.
  EXPECT_EQ(run_handshake(cache, ca_->root_cert().get(), "api.github.com", "evil.example"), -1);
  // An invalid SNI is refused during the handshake.
  EXPECT_EQ(run_handshake(cache, ca_->root_cert().get(), "bad-.example", "bad-.example"), -1);
  // '_' is a label byte (common/host_name.h): the leaf is minted and OpenSSL's client check
  // accepts it, so a destination with '_' that the policy lints clean works end to end.
  EXPECT_EQ(run_handshake(cache, ca_->root_cert().get(), "my_bucket.example", "my_bucket.example"),
            X509_V_OK);
}

}  // namespace
}  // namespace cordon::ca
