// Writes the seed corpus of fuzz_client_hello: real OpenSSL ClientHellos (with and without SNI,
// ALPN h2/http1.1, TLS 1.2-only) whole, split into several records, and a few refused shapes.
// Usage: make_client_hello_corpus DIR   (run once; the files are committed)
#include <openssl/ssl.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gateway/stages/testing/client_hello_samples.h"

using cordon::gateway::testing::HelloOptions;
using cordon::gateway::testing::make_client_hello;
using cordon::gateway::testing::split_into_records;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  std::vector<std::pair<std::string, std::string>> files;
  std::string sni_alpn = make_client_hello(HelloOptions{"api.example.com", {"h2", "http/1.1"}, 0});
  std::string no_sni = make_client_hello(HelloOptions{"", {}, 0});
  std::string tls12 =
      make_client_hello(HelloOptions{"www.example.org", {"http/1.1"}, TLS1_2_VERSION});
  files.emplace_back("sni_alpn", sni_alpn);
  files.emplace_back("no_sni", no_sni);
  files.emplace_back("tls12_only", tls12);
  files.emplace_back("sni_alpn_records_100", split_into_records(sni_alpn, {100}));
  files.emplace_back("sni_alpn_records_1_3_60", split_into_records(sni_alpn, {1, 3, 60, 4096}));
  files.emplace_back("no_sni_records_7", split_into_records(no_sni, {7}));
  files.emplace_back("plain_http", "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n");
  files.emplace_back("sslv2", std::string("\x80\x2e\x01\x00\x02\x00\x15\x00\x00\x00\x10", 11));
  files.emplace_back("truncated_half", sni_alpn.substr(0, sni_alpn.size() / 2));
  for (const auto& [name, bytes] : files) {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
      return 1;
    }
  }
  std::printf("wrote %zu files to %s\n", files.size(), dir.c_str());
  return 0;
}
