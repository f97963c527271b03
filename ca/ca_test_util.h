// Helpers shared by the ca/ unit tests (not part of the library).
#pragma once

#include "common/testing/temp_dir.h"

#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <string>

namespace cordon::ca::test {

using TempDir = cordon::testing::TempDir;

// X509_verify_cert of `leaf` against `root` alone, as a TLS client checking a server named
// `name` (a host name, or an IP address when ip is set). Returns the X509_V_* result.
inline int verify_leaf(X509* root, X509* leaf, const std::string& name, bool ip = false,
                       time_t at = 0) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, root);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  if (ip) {
    X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size());
  }
  if (at != 0) X509_VERIFY_PARAM_set_time(param, at);
  int ok = X509_verify_cert(ctx);
  int err = X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok == 1 ? X509_V_OK : (err == X509_V_OK ? -1 : err);
}

}  // namespace cordon::ca::test
