// RAII owners for the OpenSSL objects the CA handles. Private to ca/.
#pragma once

#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

namespace cordon::ca::detail {

struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct PKeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PKeyCtxFree {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct BioFree {
  void operator()(BIO* p) const { BIO_free_all(p); }
};
struct BnFree {
  void operator()(BIGNUM* p) const { BN_free(p); }
};
struct ExtFree {
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
struct NameFree {
  void operator()(X509_NAME* p) const { X509_NAME_free(p); }
};
struct GenNamesFree {
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};

using UniqueX509 = std::unique_ptr<X509, X509Free>;
using UniquePKey = std::unique_ptr<EVP_PKEY, PKeyFree>;
using UniquePKeyCtx = std::unique_ptr<EVP_PKEY_CTX, PKeyCtxFree>;
using UniqueBio = std::unique_ptr<BIO, BioFree>;
using UniqueBn = std::unique_ptr<BIGNUM, BnFree>;
using UniqueExt = std::unique_ptr<X509_EXTENSION, ExtFree>;
using UniqueName = std::unique_ptr<X509_NAME, NameFree>;
using UniqueGenNames = std::unique_ptr<GENERAL_NAMES, GenNamesFree>;

// The first queued OpenSSL error as text (and clears the queue), for error messages.
std::string openssl_error();

}  // namespace cordon::ca::detail
