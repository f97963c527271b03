#include "gateway/stages/testing/client_hello_samples.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace cordon::gateway::testing {
namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "client_hello_samples: %s failed\n", what);
  ERR_print_errors_fp(stderr);
  std::abort();
}

}  // namespace

std::string make_client_hello(const HelloOptions& options) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) die("SSL_CTX_new");
  if (options.max_version != 0 && SSL_CTX_set_max_proto_version(ctx, options.max_version) != 1) {
    die("SSL_CTX_set_max_proto_version");
  }
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) die("SSL_new");
  BIO* rbio = BIO_new(BIO_s_mem());
  BIO* wbio = BIO_new(BIO_s_mem());
  if (rbio == nullptr || wbio == nullptr) die("BIO_new");
  SSL_set_bio(ssl, rbio, wbio);  // ssl owns both BIOs from here
  if (!options.sni.empty() && SSL_set_tlsext_host_name(ssl, options.sni.c_str()) != 1) {
    die("SSL_set_tlsext_host_name");
  }
  if (!options.alpn.empty()) {
    std::string wire;
    for (const auto& p : options.alpn) {
      wire += char(p.size());
      wire += p;
    }
    // SSL_set_alpn_protos returns 0 on success (inverted convention).
    if (SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(wire.data()),
                            unsigned(wire.size())) != 0) {
      die("SSL_set_alpn_protos");
    }
  }
  SSL_set_connect_state(ssl);
  int rc = SSL_do_handshake(ssl);
  if (rc == 1 || SSL_get_error(ssl, rc) != SSL_ERROR_WANT_READ) die("SSL_do_handshake");
  char* data = nullptr;
  long n = BIO_get_mem_data(wbio, &data);
  if (n <= 0) die("BIO_get_mem_data");
  std::string out(data, size_t(n));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return out;
}

std::string split_into_records(std::string_view wire, std::vector<size_t> sizes) {
  if (wire.size() < 5 || sizes.empty()) std::abort();
  size_t len = (size_t(uint8_t(wire[3])) << 8) | uint8_t(wire[4]);
  if (wire.size() < 5 + len) std::abort();
  std::string_view message = wire.substr(5, len);
  std::string out;
  size_t i = 0;
  size_t k = 0;
  while (i < message.size()) {
    size_t n = std::min(sizes[std::min(k, sizes.size() - 1)], message.size() - i);
    if (n == 0) std::abort();
    out += wire[0];
    out += wire[1];
    out += wire[2];
    out += char(n >> 8);
    out += char(n & 0xff);
    out.append(message.substr(i, n));
    i += n;
    ++k;
  }
  out.append(wire.substr(5 + len));  // whatever followed the first record
  return out;
}

}  // namespace cordon::gateway::testing
