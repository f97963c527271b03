#include "tests/e2e/gateway/e2e_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace cordon::gateway::e2e {

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

CurlResult run_curl(const std::vector<std::string>& args, const std::string& tmpdir) {
  return run_curl_with("curl", args, tmpdir);
}

CurlResult run_curl_with(const std::string& program, const std::vector<std::string>& args,
                         const std::string& tmpdir) {
  static int seq = 0;
  std::string n = std::to_string(++seq);
  std::string body_path = tmpdir + "/body" + n, head_path = tmpdir + "/head" + n,
              code_path = tmpdir + "/code" + n;
  // A caller that passes its own -o (e.g. /dev/null for big bodies) gets no body captured.
  bool own_output = std::find(args.begin(), args.end(), "-o") != args.end();
  std::vector<std::string> argv = {
      "curl", "-sS",     "--max-time", "60",
      "-D",   head_path, "-w",         "%{http_code} %{http_connect} %{size_download}"};
  if (!own_output) {
    argv.push_back("-o");
    argv.push_back(body_path);
  }
  argv.insert(argv.end(), args.begin(), args.end());
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(code_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    // No proxy from the environment: only what the test passes.
    for (const char* v : {"http_proxy", "https_proxy", "HTTPS_PROXY", "ALL_PROXY", "all_proxy",
                          "NO_PROXY", "no_proxy"}) {
      unsetenv(v);
    }
    execvp(program.c_str(), cargv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CurlResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  // The CONNECT reply's status when the tunnel itself was refused.
  std::string codes = slurp(code_path);
  int code = 0, connect_code = 0;
  unsigned long long size = 0;
  std::sscanf(codes.c_str(), "%d %d %llu", &code, &connect_code, &size);
  r.size_download = size;
  r.http_code = code ? code : connect_code;
  r.headers = slurp(head_path);
  r.body = slurp(body_path);
  ::unlink(body_path.c_str());
  ::unlink(head_path.c_str());
  ::unlink(code_path.c_str());
  return r;
}

RawClient::~RawClient() {
  if (ssl_) SSL_free(ssl_);
  if (ctx_) SSL_CTX_free(ctx_);
  if (fd_ >= 0) ::close(fd_);
}

bool RawClient::connect_tcp(uint16_t port, int timeout_ms) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

std::string RawClient::connect_tunnel(const std::string& authority, const std::string& user_pass) {
  static const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  int val = 0, bits = -6;
  for (unsigned char c : user_pass) {
    val = (val << 8) + c;
    bits += 8;
    while (bits >= 0) {
      b64.push_back(kB64[(val >> bits) & 0x3F]);
      bits -= 6;
    }
  }
  if (bits > -6) b64.push_back(kB64[((val << 8) >> (bits + 8)) & 0x3F]);
  while (b64.size() % 4) b64.push_back('=');
  send("CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority +
       "\r\nProxy-Authorization: Basic " + b64 + "\r\n\r\n");
  std::string head;
  char c;
  while (head.find("\r\n\r\n") == std::string::npos) {
    int n = static_cast<int>(::recv(fd_, &c, 1, 0));
    if (n <= 0) break;
    head.push_back(c);
  }
  return head;
}

bool RawClient::start_tls(const std::string& sni, const std::string& ca_pem_path) {
  ctx_ = SSL_CTX_new(TLS_client_method());
  SSL_CTX_load_verify_locations(ctx_, ca_pem_path.c_str(), nullptr);
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
  ssl_ = SSL_new(ctx_);
  SSL_set_fd(ssl_, fd_);
  if (!sni.empty()) {
    SSL_set_tlsext_host_name(ssl_, sni.c_str());
    SSL_set1_host(ssl_, sni.c_str());
  }
  return SSL_connect(ssl_) == 1;
}

std::string RawClient::peer_serial() const {
  X509* c = ssl_ ? SSL_get0_peer_certificate(ssl_) : nullptr;
  if (!c) return "";
  BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(c), nullptr);
  char* hex = BN_bn2hex(bn);
  std::string out = hex ? hex : "";
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

std::string RawClient::peer_not_after() const {
  X509* c = ssl_ ? SSL_get0_peer_certificate(ssl_) : nullptr;
  if (!c) return "";
  BIO* b = BIO_new(BIO_s_mem());
  ASN1_TIME_print(b, X509_get0_notAfter(c));
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(b);
  return out;
}

bool RawClient::send(const std::string& data) {
  return send(data.data(), data.size());
}

bool RawClient::send(const char* data, size_t size) {
  size_t off = 0;
  while (off < size) {
    int n = ssl_ ? SSL_write(ssl_, data + off, static_cast<int>(size - off))
                 : static_cast<int>(::send(fd_, data + off, size - off, MSG_NOSIGNAL));
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

int RawClient::read_some(char* buf, int len) {
  int n = ssl_ ? SSL_read(ssl_, buf, len) : static_cast<int>(::recv(fd_, buf, len, 0));
  if (n <= 0) {
    // Timeout (EAGAIN) is not a close; everything else is.
    if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
          (!ssl_ || SSL_get_error(ssl_, n) == SSL_ERROR_WANT_READ ||
           SSL_get_error(ssl_, n) == SSL_ERROR_SYSCALL))) {
      closed_ = true;
    }
    if (n == 0) closed_ = true;
  }
  return n;
}

std::string RawClient::read_until_close() {
  std::string out = std::move(pending_);
  char buf[16384];
  while (true) {
    int n = read_some(buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string RawClient::read_until(const std::string& marker, int count) {
  std::string out = std::move(pending_);
  char buf[16384];
  while (static_cast<int>(count_of(out, marker)) < count) {
    int n = read_some(buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

bool wait_until(const std::function<bool()>& done, int ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::vector<AuditRecord> records_where(const testing::MemoryAudit& audit,
                                       const RecordMatch& match) {
  std::vector<AuditRecord> out;
  for (auto& r : audit.records()) {
    if (match(r)) out.push_back(r);
  }
  return out;
}

std::vector<AuditRecord> wait_records(const testing::MemoryAudit& audit, const RecordMatch& match,
                                      size_t at_least, int ms) {
  std::vector<AuditRecord> out;
  wait_until(
      [&] {
        out = records_where(audit, match);
        return out.size() >= at_least;
      },
      ms);
  return out;
}

void expect_every_decision_audited(const testing::MemoryAudit& audit) {
  auto unaudited =
      records_where(audit, [](const AuditRecord& r) { return r.reason == "unaudited_exit"; });
  EXPECT_TRUE(unaudited.empty()) << unaudited.size() << " decision(s) ended without their line, "
                                 << "first: " << unaudited.front().request_id;
}

void GatewayFixture::TearDown() {
  expect_every_decision_audited(*audit);
  stop_gateway();
  if (!tmp.empty()) std::filesystem::remove_all(tmp);
}

void GatewayFixture::make_tmp(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << tmpl << ": " << std::strerror(errno);
  tmp = tmpl;
}

void GatewayFixture::use_upstream(std::unique_ptr<testing::FakeUpstream> up) {
  upstream = std::move(up);
  upstream_ca = tmp + "/upstream-ca.pem";
  upstream->ca().write_pem(upstream_ca);
}

void GatewayFixture::start_upstream(const std::vector<std::string>& names) {
  use_upstream(std::make_unique<testing::FakeUpstream>(names));
}

void GatewayFixture::make_certs() {
  certs = std::make_shared<testing::FakeCerts>();
  gateway_ca = tmp + "/gateway-ca.pem";
  certs->ca().write_pem(gateway_ca);
}

GatewayOptions GatewayFixture::loopback_options(unsigned threads) const {
  GatewayOptions opts;
  opts.threads = threads;
  opts.system_trust_store = false;
  if (!upstream_ca.empty()) opts.upstream_ca_files = {upstream_ca};
  return opts;
}

void GatewayFixture::create_gateway(const GatewayOptions& opts, GatewayPorts ports,
                                    std::shared_ptr<const PolicyView> policy) {
  auto gw = Gateway::create(opts, std::move(ports));
  ASSERT_TRUE(gw) << gw.error().message;
  gateway = std::move(*gw);
  gateway->set_policy(std::move(policy));
}

void GatewayFixture::listen_proxy() {
  auto p = gateway->listen_proxy("127.0.0.1:0");
  ASSERT_TRUE(p) << p.error().message;
  proxy_port = *p;
}

void GatewayFixture::start_proxy_gateway(const GatewayOptions& opts, GatewayPorts ports,
                                         std::shared_ptr<const PolicyView> policy) {
  ASSERT_NO_FATAL_FAILURE(create_gateway(opts, std::move(ports), std::move(policy)));
  ASSERT_NO_FATAL_FAILURE(listen_proxy());
  gateway->start();
}

void GatewayFixture::stop_gateway() {
  if (gateway) gateway->stop(500);
  gateway.reset();
  upstream.reset();
}

std::string GatewayFixture::upstream_url(const std::string& host, const std::string& path) const {
  return "https://" + host + ":" + std::to_string(upstream->port()) + path;
}

std::vector<std::string> GatewayFixture::proxy_args(const std::string& auth) const {
  std::vector<std::string> args = {"--proxy", "http://127.0.0.1:" + std::to_string(proxy_port),
                                   "--cacert", gateway_ca};
  if (!auth.empty()) {
    args.push_back("--proxy-user");
    args.push_back(auth);
  }
  return args;
}

CurlResult GatewayFixture::proxy_curl(const std::vector<std::string>& args,
                                      const std::string& auth) {
  std::vector<std::string> all = proxy_args(auth);
  all.insert(all.end(), args.begin(), args.end());
  return run_curl(all, tmp);
}

std::unique_ptr<RawClient> GatewayFixture::open_tunnel(const std::string& host,
                                                       const std::string& auth, int timeout_ms) {
  auto c = std::make_unique<RawClient>();
  EXPECT_TRUE(c->connect_tcp(proxy_port, timeout_ms));
  std::string head = c->connect_tunnel(host + ":" + std::to_string(upstream->port()), auth);
  EXPECT_NE(head.find(" 200 "), std::string::npos) << head;
  return c;
}

}  // namespace cordon::gateway::e2e
