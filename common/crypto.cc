#include "common/crypto.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace cordon {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), int(n)) != 1) {
    // Without working randomness no key, nonce or token may be produced: stop here.
    std::fputs("cordon: fatal: the OpenSSL CSPRNG failed\n", stderr);
    std::abort();
  }
  return out;
}

namespace {

// With EVP_sha256(), OpenSSL 3 looks the implementation up again on every digest (a lock and a
// search: more than hashing a 400-byte audit line costs). Fetched once, it is reused.
const EVP_MD* sha256_md() {
  static EVP_MD* md = [] {
    EVP_MD* m = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    if (!m) {
      std::fputs("cordon: fatal: OpenSSL has no SHA-256\n", stderr);
      std::abort();
    }
    return m;
  }();
  return md;
}

}  // namespace

std::string sha256(std::string_view data) {
  thread_local std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                                           &EVP_MD_CTX_free);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), sha256_md(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), md, &len) != 1) {
    std::fputs("cordon: fatal: SHA-256 failed\n", stderr);
    std::abort();
  }
  return std::string(reinterpret_cast<char*>(md), len);
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), int(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len);
  return std::string(reinterpret_cast<char*>(md), len);
}

}  // namespace cordon
