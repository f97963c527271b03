#include "gateway/testing/fake_upstream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include "common/encoding.h"
#include "gateway/testing/websocket_echo.h"

namespace cordon::gateway::testing {

namespace {

// Blocking byte I/O over a socket, TLS or not, with a read buffer.
struct Conn {
  int fd;
  SSL* ssl;
  std::string buf;

  bool fill() {
    char tmp[16384];
    int n = ssl ? SSL_read(ssl, tmp, sizeof tmp) : static_cast<int>(::read(fd, tmp, sizeof tmp));
    if (n <= 0) return false;
    buf.append(tmp, static_cast<size_t>(n));
    return true;
  }
  bool write(std::string_view s) {
    while (!s.empty()) {
      int n = ssl ? SSL_write(ssl, s.data(), static_cast<int>(s.size()))
                  : static_cast<int>(::write(fd, s.data(), s.size()));
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  bool read_line(std::string& line) {
    while (true) {
      size_t p = buf.find("\r\n");
      if (p != std::string::npos) {
        line = buf.substr(0, p);
        buf.erase(0, p + 2);
        return true;
      }
      if (buf.size() > 65536 || !fill()) return false;
    }
  }
  // Consumes n body bytes, adding them to the sum.
  bool consume(uint64_t n, uint64_t& total, uint32_t& sum) {
    while (n > 0) {
      if (buf.empty() && !fill()) return false;
      size_t k = std::min<uint64_t>(n, buf.size());
      for (size_t i = 0; i < k; ++i) sum += static_cast<unsigned char>(buf[i]);
      buf.erase(0, k);
      n -= k;
      total += k;
    }
    return true;
  }
};

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

uint64_t query_n(const std::string& target) {
  size_t p = target.find("n=");
  return p == std::string::npos ? 0 : std::stoull(target.substr(p + 2));
}

// /reflect...: the request head, values included, as JSON (escaped with "\/", as PHP does)
// and base64, the way debugging endpoints reflect a request (specs/egress-threats.md item 23).
// /reflect: Content-Length; /reflect-chunked: chunked in 7-byte chunks (matches split across
// chunks); /reflect-gzip: gzip whatever Accept-Encoding said; /reflect-br: claims br (bytes
// the gateway cannot check).
std::string reflect_response(const std::string& target, const std::string& method,
                             const std::string& head) {
  std::string escaped;
  for (char ch : head) {
    if (ch == '"' || ch == '\\') {
      escaped += '\\';
      escaped += ch;
    } else if (ch == '/') {
      escaped += "\\/";
    } else if (ch == '\n') {
      escaped += "\\n";
    } else {
      escaped += ch;
    }
  }
  std::string body = "{\"head\":\"" + escaped + "\",\"b64\":\"" + base64_encode(head) + "\"}\n";
  if (method == "HEAD") body.clear();
  std::string headers = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
  if (target.rfind("/reflect-chunked", 0) == 0) {
    std::string out = headers + "Transfer-Encoding: chunked\r\n\r\n";
    for (size_t i = 0; i < body.size(); i += 7) {
      std::string piece = body.substr(i, 7);
      char hex[16];
      std::snprintf(hex, sizeof hex, "%zx\r\n", piece.size());
      out += hex + piece + "\r\n";
    }
    return out + "0\r\nX-Reflect-Trailer: " + base64_encode(head) + "\r\n\r\n";
  }
  if (target.rfind("/reflect-gzip", 0) == 0 || target.rfind("/reflect-br", 0) == 0) {
    bool br = target.rfind("/reflect-br", 0) == 0;
    std::string z(compressBound(static_cast<uLong>(body.size())) + 64, '\0');
    z_stream zs{};
    deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    zs.next_in = reinterpret_cast<Bytef*>(body.data());
    zs.avail_in = static_cast<uInt>(body.size());
    zs.next_out = reinterpret_cast<Bytef*>(z.data());
    zs.avail_out = static_cast<uInt>(z.size());
    deflate(&zs, Z_FINISH);
    z.resize(zs.total_out);
    deflateEnd(&zs);
    if (method == "HEAD") z.clear();
    return headers + "Content-Encoding: " + (br ? "br" : "gzip") +
           "\r\nContent-Length: " + std::to_string(z.size()) + "\r\n\r\n" + z;
  }
  return headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}
}  // namespace

FakeUpstream::FakeUpstream(const std::vector<std::string>& names, bool tls, uint16_t port,
                           bool any_address)
    : ca_("fake upstream test CA"), tls_(tls) {
  if (tls_) {
    ctx_ = SSL_CTX_new(TLS_server_method());
    LeafCert leaf = ca_.issue(names);
    SSL_CTX_use_certificate(ctx_, leaf.cert.get());
    SSL_CTX_use_PrivateKey(ctx_, leaf.key.get());
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(any_address ? INADDR_ANY : INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 128) != 0) {
    throw std::runtime_error("fake upstream: bind/listen failed");
  }
  socklen_t len = sizeof a;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

FakeUpstream::~FakeUpstream() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  acceptor_.join();
  {
    std::lock_guard lk(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : workers_) t.join();
  if (ctx_) SSL_CTX_free(ctx_);
}

std::vector<std::string> FakeUpstream::heads() const {
  std::lock_guard lk(heads_mu_);
  return heads_;
}

void FakeUpstream::clear() {
  std::lock_guard lk(heads_mu_);
  heads_.clear();
}

void FakeUpstream::accept_loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    connections_++;
    std::lock_guard lk(mu_);
    fds_.push_back(fd);
    workers_.emplace_back([this, fd] { serve(fd); });
  }
}

void FakeUpstream::serve(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  SSL* ssl = nullptr;
  if (tls_) {
    ssl = SSL_new(ctx_);
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) != 1) {
      SSL_free(ssl);
      ::close(fd);
      return;
    }
  }
  Conn c{fd, ssl, {}};
  while (!stop_) {
    std::string line;
    if (!c.read_line(line) || line.empty()) break;
    std::string head = line + "\n";
    std::multimap<std::string, std::string> h;
    bool bad = false;
    while (true) {
      std::string hl;
      if (!c.read_line(hl)) {
        bad = true;
        break;
      }
      if (hl.empty()) break;
      head += hl + "\n";
      size_t colon = hl.find(':');
      if (colon == std::string::npos) continue;
      std::string v = hl.substr(colon + 1);
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      h.emplace(lower(hl.substr(0, colon)), v);
    }
    if (bad) break;
    {
      std::lock_guard lk(heads_mu_);
      heads_.push_back(head);
    }
    std::string method = line.substr(0, line.find(' '));
    std::string target = line.substr(line.find(' ') + 1);
    target = target.substr(0, target.find(' '));
    uint64_t total = 0;
    uint32_t sum = 0;
    bool ok = true;
    if (h.count("transfer-encoding")) {
      while (ok) {
        std::string sz;
        if (!c.read_line(sz)) {
          ok = false;
          break;
        }
        uint64_t n = std::stoull(sz, nullptr, 16);
        if (n == 0) {
          std::string t;
          while ((ok = c.read_line(t)) && !t.empty()) head += "trailer " + t + "\n";
          break;
        }
        ok = c.consume(n, total, sum);
        std::string crlf;
        ok = ok && c.read_line(crlf);
      }
    } else if (auto it = h.find("content-length"); it != h.end()) {
      ok = c.consume(std::stoull(it->second), total, sum);
    }
    if (!ok) break;

    auto header_or = [&](const char* name) {
      auto it = h.find(name);
      return it == h.end() ? std::string() : it->second;
    };
    if (lower(header_or("upgrade")) == "websocket" && h.count("sec-websocket-key")) {
      c.write(
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          "Sec-WebSocket-Accept: " +
          websocket_accept(header_or("sec-websocket-key")) +
          "\r\nX-Echo-Authorization: " + header_or("authorization") + "\r\n\r\n");
      websocket_echo(
          c.buf, [&c] { return c.fill(); }, [&c](std::string_view d) { return c.write(d); });
      break;
    }
    if (target.rfind("/switch", 0) == 0) {
      // Switches protocols although nobody asked: the gateway must not tunnel this.
      c.write(
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
      break;
    }
    if (target.rfind("/reset", 0) == 0) {
      c.write("HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + std::string(1000, 'r'));
      linger l{1, 0};
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
      break;  // close with RST
    }
    if (target.rfind("/reflect", 0) == 0) {
      if (!c.write(reflect_response(target, method, head))) break;
      continue;
    }
    if (target.rfind("/bigchunked", 0) == 0) {
      uint64_t n = query_n(target);
      if (!c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")) break;
      std::string chunk(65536, 'b');
      while (n > 0 && ok) {
        size_t k = std::min<uint64_t>(n, chunk.size());
        char hex[32];
        std::snprintf(hex, sizeof hex, "%zx\r\n", k);
        ok = c.write(hex) && c.write(std::string_view(chunk).substr(0, k)) && c.write("\r\n");
        n -= k;
      }
      if (!ok || !c.write("0\r\nX-Trailer: done\r\n\r\n")) break;
      continue;
    }
    if (target.rfind("/big", 0) == 0) {
      uint64_t n = query_n(target);
      if (!c.write("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(n) + "\r\n\r\n")) break;
      std::string chunk(65536, 'b');
      while (n > 0 && ok) {
        size_t k = std::min<uint64_t>(n, chunk.size());
        ok = c.write(std::string_view(chunk).substr(0, k));
        n -= k;
      }
      if (!ok) break;
      continue;
    }
    std::string body;
    std::string extra;
    if (target.rfind("/upload", 0) == 0) {
      body = "bytes=" + std::to_string(total) + " sum=" + std::to_string(sum) + "\n";
    } else {
      // Header names only: the values the upstream saw are checked through heads(), so that a
      // test can tell what the sandbox receives from what the upstream received.
      body = line + "\n";
      for (const auto& [k, v] : h) body += k + "\n";
      body += "body-bytes: " + std::to_string(total) + "\n";
      if (h.count("authorization"))
        extra += "X-Echo-Authorization: " + header_or("authorization") + "\r\n";
      if (h.count("x-api-key")) extra += "X-Echo-Api-Key: " + header_or("x-api-key") + "\r\n";
    }
    std::string resp = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + extra +
                       "Content-Length: " + std::to_string(method == "HEAD" ? 0 : body.size()) +
                       "\r\n\r\n" + (method == "HEAD" ? "" : body);
    if (!c.write(resp)) break;
  }
  if (ssl) {
    SSL_shutdown(ssl);
    SSL_free(ssl);
  }
  ::close(fd);
}

}  // namespace cordon::gateway::testing
