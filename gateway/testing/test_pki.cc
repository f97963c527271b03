#include "gateway/testing/test_pki.h"

#include <arpa/inet.h>
#include <openssl/ec.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <fstream>
#include <stdexcept>

namespace cordon::gateway::testing {

std::shared_ptr<EVP_PKEY> make_ec_key() {
  EVP_PKEY* k = EVP_EC_gen("P-256");
  if (!k) throw std::runtime_error("EVP_EC_gen failed");
  return std::shared_ptr<EVP_PKEY>(k, EVP_PKEY_free);
}

std::string cert_pem(X509* cert) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(b);
  return out;
}

std::string key_pem(EVP_PKEY* key) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(b);
  return out;
}

namespace {
std::atomic<long> g_serial{1000};

void add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) throw std::runtime_error("bad extension " + value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

std::shared_ptr<X509> new_cert(EVP_PKEY* key, const std::string& cn) {
  X509* c = X509_new();
  X509_set_version(c, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c), g_serial++);
  X509_gmtime_adj(X509_getm_notBefore(c), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c), 86400);
  X509_set_pubkey(c, key);
  X509_NAME* name = X509_get_subject_name(c);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return std::shared_ptr<X509>(c, X509_free);
}
}  // namespace

TestCa::TestCa(const std::string& common_name) {
  key_ = make_ec_key();
  cert_ = new_cert(key_.get(), common_name);
  X509_set_issuer_name(cert_.get(), X509_get_subject_name(cert_.get()));
  add_ext(cert_.get(), cert_.get(), NID_basic_constraints, "critical,CA:TRUE");
  add_ext(cert_.get(), cert_.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  add_ext(cert_.get(), cert_.get(), NID_subject_key_identifier, "hash");
  X509_sign(cert_.get(), key_.get(), EVP_sha256());
  pem_ = cert_pem(cert_.get());
}

LeafCert TestCa::issue(const std::vector<std::string>& names, std::shared_ptr<EVP_PKEY> key) const {
  if (!key) key = make_ec_key();
  auto c = new_cert(key.get(), names.empty() ? "leaf" : names.front());
  X509_set_issuer_name(c.get(), X509_get_subject_name(cert_.get()));
  std::string san;
  for (const auto& n : names) {
    unsigned char buf[16];
    bool ip = inet_pton(AF_INET, n.c_str(), buf) == 1 || inet_pton(AF_INET6, n.c_str(), buf) == 1;
    if (!san.empty()) san += ",";
    san += (ip ? "IP:" : "DNS:") + n;
  }
  add_ext(c.get(), cert_.get(), NID_subject_alt_name, san);
  add_ext(c.get(), cert_.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_ext(c.get(), cert_.get(), NID_ext_key_usage, "serverAuth");
  add_ext(c.get(), cert_.get(), NID_authority_key_identifier, "keyid");
  X509_sign(c.get(), key_.get(), EVP_sha256());
  LeafCert out;
  out.cert = c;
  out.key = key;
  return out;
}

void TestCa::write_pem(const std::string& path) const {
  std::ofstream f(path);
  f << pem_;
}

}  // namespace cordon::gateway::testing
