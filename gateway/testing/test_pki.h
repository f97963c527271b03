// Test-only PKI: a throwaway CA that issues leaf certificates, for the fake upstream server and
// for the fake CertProvider. Nothing here is used outside tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gateway/ports.h"

namespace cordon::gateway::testing {

std::shared_ptr<EVP_PKEY> make_ec_key();
std::string cert_pem(X509* cert);
std::string key_pem(EVP_PKEY* key);

class TestCa {
 public:
  explicit TestCa(const std::string& common_name);
  // A leaf for `names` (DNS names, or IP literals), signed by this CA, with `key` (or a new key).
  LeafCert issue(const std::vector<std::string>& names, std::shared_ptr<EVP_PKEY> key = {}) const;
  const std::string& pem() const { return pem_; }
  X509* cert() const { return cert_.get(); }
  // Writes the CA certificate PEM to `path`.
  void write_pem(const std::string& path) const;

 private:
  std::shared_ptr<EVP_PKEY> key_;
  std::shared_ptr<X509> cert_;
  std::string pem_;
};

}  // namespace cordon::gateway::testing
