// cordon-fake-upstream: the "internet" of scripts/demo-egress.sh. A TLS HTTP/1.1 server that
// answers every request with a JSON echo of what it received (method, path, Host, SNI and all
// request headers), so the demo can show that the upstream got the real key while the agent
// never saw it: credential headers are answered only as a sha256 fingerprint, while each request
// is printed in full as one JSON line on stdout (the demo's upstream
// log). It trusts nothing and keeps nothing; it only ever runs inside the demo's own network
// namespace. A request with `Upgrade: websocket` is answered 101 and then echoed frame by frame
// (RFC 6455, minimal), after the same log line. /slow?seconds=N streams for N seconds (see
// stream_slowly). Usage: cordon-fake-upstream CERT.pem KEY.pem
// ADDR:PORT
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "gateway/testing/websocket_echo.h"

namespace {

constexpr size_t kMaxHeadBytes = 64 * 1024;
constexpr size_t kMaxBodyBytes = 1024 * 1024;
std::mutex g_log_mu;

// Credential headers are echoed to the client only as a fingerprint: the full value goes to the
// upstream log (stdout), which the demo reads on the host, never into the sandbox.
std::string fingerprint(const std::string& v) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(v.data(), v.size(), md, &len, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned i = 0; i < 8; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// /slow?seconds=N (default 30, at most 600): a chunked response that sends one "tick" line
// every 250 ms for N seconds, for a client that needs a connection kept busy (a long download).
// Stops early when the client goes away.
void stream_slowly(SSL* ssl, const std::string& path) {
  long seconds = 30;
  size_t q = path.find("seconds=");
  if (q != std::string::npos) seconds = std::strtol(path.c_str() + q + 8, nullptr, 10);
  seconds = std::clamp(seconds, 1L, 600L);
  std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
      "Connection: close\r\n\r\n";
  if (SSL_write(ssl, head.data(), static_cast<int>(head.size())) <= 0) return;
  static const std::string kTick = "5\r\ntick\n\r\n";
  for (long i = 0; i < seconds * 4; ++i) {
    if (SSL_write(ssl, kTick.data(), static_cast<int>(kTick.size())) <= 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  SSL_write(ssl, "0\r\n\r\n", 5);
}

// Reads one request head (and its Content-Length body, discarded) and answers it; one request
// per connection (Connection: close) keeps the server simple.
void serve(SSL_CTX* ctx, int fd) {
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (SSL_accept(ssl) != 1) {
    SSL_free(ssl);
    ::close(fd);
    return;
  }
  std::string buf;
  char chunk[4096];
  size_t end = std::string::npos;
  while ((end = buf.find("\r\n\r\n")) == std::string::npos && buf.size() < kMaxHeadBytes) {
    int n = SSL_read(ssl, chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
  }
  if (end != std::string::npos) {
    nlohmann::json j;
    const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    j["sni"] = sni ? sni : "";
    std::string head = buf.substr(0, end);
    size_t line_end = head.find("\r\n");
    std::string line = head.substr(0, line_end);
    size_t sp1 = line.find(' ');
    size_t sp2 = line.find(' ', sp1 == std::string::npos ? 0 : sp1 + 1);
    j["method"] = line.substr(0, sp1);
    j["path"] = sp1 == std::string::npos ? "" : line.substr(sp1 + 1, sp2 - sp1 - 1);
    nlohmann::json headers = nlohmann::json::object();
    size_t content_length = 0;
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string h = head.substr(pos, e - pos);
      pos = e + 2;
      size_t colon = h.find(':');
      if (colon == std::string::npos) continue;
      std::string name = lower(h.substr(0, colon));
      std::string value = h.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.erase(0, 1);
      if (name == "content-length") content_length = std::strtoul(value.c_str(), nullptr, 10);
      headers[name] = value;
    }
    j["host"] = headers.value("host", "");
    j["headers"] = headers;
    size_t have = buf.size() - (end + 4);
    while (have < content_length && have < kMaxBodyBytes) {
      int n = SSL_read(ssl, chunk, sizeof chunk);
      if (n <= 0) break;
      have += static_cast<size_t>(n);
    }
    std::string log_line = j.dump() + "\n";
    for (const char* h : {"authorization", "x-api-key", "proxy-authorization"}) {
      if (headers.contains(h)) j["headers"][h] = fingerprint(headers[h].get<std::string>());
    }
    if (lower(headers.value("upgrade", "")) == "websocket" &&
        headers.contains("sec-websocket-key")) {
      {
        std::lock_guard<std::mutex> lock(g_log_mu);
        std::fputs(log_line.c_str(), stdout);
        std::fflush(stdout);
      }
      std::string accept =
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
          "Connection: Upgrade\r\nSec-WebSocket-Accept: " +
          cordon::gateway::testing::websocket_accept(
              headers["sec-websocket-key"].get<std::string>()) +
          "\r\n\r\n";
      SSL_write(ssl, accept.data(), static_cast<int>(accept.size()));
      std::string rest = buf.substr(end + 4);
      cordon::gateway::testing::websocket_echo(
          rest,
          [&] {
            int n = SSL_read(ssl, chunk, sizeof chunk);
            if (n <= 0) return false;
            rest.append(chunk, static_cast<size_t>(n));
            return true;
          },
          [&](std::string_view d) {
            return SSL_write(ssl, d.data(), static_cast<int>(d.size())) ==
                   static_cast<int>(d.size());
          });
      SSL_shutdown(ssl);
      SSL_free(ssl);
      ::close(fd);
      return;
    }
    std::string path = j["path"].get<std::string>();
    if (path.rfind("/slow", 0) == 0) {
      {
        std::lock_guard<std::mutex> lock(g_log_mu);
        std::fputs(log_line.c_str(), stdout);
        std::fflush(stdout);
      }
      stream_slowly(ssl, path);
      SSL_shutdown(ssl);
      SSL_free(ssl);
      ::close(fd);
      return;
    }
    std::string body = j.dump() + "\n";
    std::string resp = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    SSL_write(ssl, resp.data(), static_cast<int>(resp.size()));
    {
      std::lock_guard<std::mutex> lock(g_log_mu);
      std::fputs(log_line.c_str(), stdout);
      std::fflush(stdout);
    }
  }
  SSL_shutdown(ssl);
  SSL_free(ssl);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: cordon-fake-upstream CERT.pem KEY.pem ADDR:PORT\n");
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, argv[1]) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, argv[2], SSL_FILETYPE_PEM) != 1) {
    std::fprintf(stderr, "cordon-fake-upstream: cannot load %s / %s\n", argv[1], argv[2]);
    ERR_print_errors_fp(stderr);
    return 1;
  }
  std::string addr = argv[3];
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "cordon-fake-upstream: %s: expected ADDR:PORT\n", argv[3]);
    return 2;
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(addr.substr(colon + 1))));
  if (inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr) != 1) {
    std::fprintf(stderr, "cordon-fake-upstream: %s: not an IPv4 address\n", argv[3]);
    return 2;
  }
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(lfd, 64) != 0) {
    std::perror("cordon-fake-upstream: bind/listen");
    return 1;
  }
  std::fprintf(stderr, "cordon-fake-upstream: listening on %s\n", argv[3]);
  while (true) {
    int fd = ::accept(lfd, nullptr, nullptr);
    if (fd < 0) continue;
    std::thread(serve, ctx, fd).detach();
  }
}
