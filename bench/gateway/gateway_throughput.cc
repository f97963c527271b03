// gateway_throughput [--seconds S] [--conns N] [--sizes 1024,65536] [--threads T]
// Keep-alive HTTPS GETs from N client threads, each on one connection: direct to the fake
// upstream (the limit), then through the gateway (CONNECT, TLS intercepted with a minted leaf,
// every request checked, a credential injected, upstream TLS pooled). Prints requests/s,
// MB/s, p50/p99 latency and the ratio to direct. Everything on loopback, in this process.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/encoding.h"
#include "gateway/gateway.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"

using namespace cordon::gateway;
using Clock = std::chrono::steady_clock;

namespace {

struct Result {
  uint64_t requests = 0;
  uint64_t bytes = 0;
  std::vector<uint32_t> latencies_us;
  bool failed = false;
};

int tcp_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void client(bool via_proxy, uint16_t upstream_port, uint16_t proxy_port, const std::string& ca,
            size_t size, Clock::time_point until, Result& out) {
  int fd = tcp_connect(via_proxy ? proxy_port : upstream_port);
  if (fd < 0) {
    out.failed = true;
    return;
  }
  std::string authority = "api.test:" + std::to_string(upstream_port);
  if (via_proxy) {
    std::string req = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority +
                      "\r\nProxy-Authorization: Basic " + cordon::base64_encode("sb:secret") +
                      "\r\n\r\n";
    ::send(fd, req.data(), req.size(), 0);
    std::string head;
    char c;
    while (head.find("\r\n\r\n") == std::string::npos && ::recv(fd, &c, 1, 0) == 1) head += c;
    if (head.find(" 200 ") == std::string::npos) {
      out.failed = true;
      ::close(fd);
      return;
    }
  }
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, "api.test");
  if (SSL_connect(ssl) != 1) {
    out.failed = true;
  } else {
    std::string req =
        "GET /big?n=" + std::to_string(size) + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";
    std::vector<char> buf(256 * 1024);
    while (Clock::now() < until) {
      auto t0 = Clock::now();
      if (SSL_write(ssl, req.data(), static_cast<int>(req.size())) <= 0) {
        out.failed = true;
        break;
      }
      // Read the head, then Content-Length bytes.
      std::string got;
      size_t body_needed = 0, have_body = 0;
      bool head_done = false;
      while (true) {
        int n = SSL_read(ssl, buf.data(), static_cast<int>(buf.size()));
        if (n <= 0) {
          out.failed = true;
          break;
        }
        if (!head_done) {
          got.append(buf.data(), static_cast<size_t>(n));
          size_t e = got.find("\r\n\r\n");
          if (e == std::string::npos) continue;
          size_t cl = got.find("Content-Length: ");
          body_needed = cl == std::string::npos ? 0 : std::stoull(got.substr(cl + 16));
          have_body = got.size() - (e + 4);
          head_done = true;
        } else {
          have_body += static_cast<size_t>(n);
        }
        if (have_body >= body_needed) break;
      }
      if (out.failed) break;
      out.requests++;
      out.bytes += body_needed;
      out.latencies_us.push_back(static_cast<uint32_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count()));
    }
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ::close(fd);
}

Result run(bool via_proxy, uint16_t upstream_port, uint16_t proxy_port, const std::string& ca,
           size_t size, int conns, int seconds) {
  std::vector<Result> per(static_cast<size_t>(conns));
  std::vector<std::thread> ts;
  auto until = Clock::now() + std::chrono::seconds(seconds);
  for (int i = 0; i < conns; ++i) {
    ts.emplace_back(client, via_proxy, upstream_port, proxy_port, ca, size, until,
                    std::ref(per[static_cast<size_t>(i)]));
  }
  for (auto& t : ts) t.join();
  Result all;
  for (auto& r : per) {
    all.requests += r.requests;
    all.bytes += r.bytes;
    all.failed = all.failed || r.failed;
    all.latencies_us.insert(all.latencies_us.end(), r.latencies_us.begin(), r.latencies_us.end());
  }
  std::sort(all.latencies_us.begin(), all.latencies_us.end());
  return all;
}

uint32_t pct(const std::vector<uint32_t>& v, double p) {
  if (v.empty()) return 0;
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  int seconds = 5, conns = 8;
  unsigned threads = 0;
  std::vector<size_t> sizes = {1024, 65536};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--seconds") seconds = std::atoi(argv[i + 1]);
    if (a == "--conns") conns = std::atoi(argv[i + 1]);
    if (a == "--threads") threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
    if (a == "--sizes") {
      sizes.clear();
      std::string s = argv[i + 1];
      for (size_t p = 0; p < s.size();) {
        size_t q = s.find(',', p);
        sizes.push_back(std::stoull(s.substr(p, q - p)));
        p = q == std::string::npos ? s.size() : q + 1;
      }
    }
  }
  std::signal(SIGPIPE, SIG_IGN);
  char tmpl[] = "/tmp/cordon-bench-XXXXXX";
  std::string tmp = mkdtemp(tmpl);
  testing::FakeUpstream upstream({"api.test"});
  std::string upstream_ca = tmp + "/upstream.pem", gateway_ca = tmp + "/gateway.pem";
  upstream.ca().write_pem(upstream_ca);
  auto certs = std::make_shared<testing::FakeCerts>();
  certs->ca().write_pem(gateway_ca);
  auto policy = std::make_shared<testing::FakePolicy>();
  policy->denied_prefixes = {"10.", "169.254."};
  CredentialSpec cred{"k", "key", "Authorization", "Bearer {secret}", TokenMode::kOptional};
  policy->destinations = {{"api",
                           {"api.test"},
                           {upstream.port()},
                           TlsMode::kIntercept,
                           false,
                           {{"big", true, {"GET"}, "/big", cred}}}};
  policy->profiles["p"] = {"api"};
  auto sandboxes = std::make_shared<testing::FakeSandboxes>();
  sandboxes->add("sb", "secret", "p");
  auto creds = std::make_shared<testing::FakeCredentials>();
  creds->put_secret("key", "bench-secret-value");
  auto audit = std::make_shared<testing::MemoryAudit>();
  GatewayOptions opts;
  opts.threads = threads;
  opts.system_trust_store = false;
  opts.upstream_ca_files = {upstream_ca};
  opts.resolve = {{"api.test", "127.0.0.1"}};
  opts.limits.pool_max_idle_per_key = static_cast<size_t>(conns) + 4;
  auto gw = Gateway::create(opts, {certs, sandboxes, creds, audit});
  if (!gw) {
    std::fprintf(stderr, "%s\n", gw.error().message.c_str());
    return 1;
  }
  (*gw)->set_policy(policy);
  auto port = (*gw)->listen_proxy("127.0.0.1:0");
  (*gw)->start();

  std::printf("%d connections, %d s per run, keep-alive HTTPS GET, loopback, %u cores\n", conns,
              seconds, std::thread::hardware_concurrency());
  std::printf("%-8s %-8s %12s %10s %10s %10s %8s\n", "size", "path", "req/s", "MB/s", "p50 us",
              "p99 us", "ratio");
  for (size_t size : sizes) {
    Result direct = run(false, upstream.port(), *port, upstream_ca, size, conns, seconds);
    // A short warm-up through the gateway (leaf mint, upstream pool), not counted.
    run(true, upstream.port(), *port, gateway_ca, size, conns, 1);
    Result via = run(true, upstream.port(), *port, gateway_ca, size, conns, seconds);
    double d_rps = static_cast<double>(direct.requests) / seconds;
    double v_rps = static_cast<double>(via.requests) / seconds;
    std::printf("%-8zu %-8s %12.0f %10.1f %10u %10u %8s%s\n", size, "direct", d_rps,
                static_cast<double>(direct.bytes) / seconds / 1e6, pct(direct.latencies_us, 0.5),
                pct(direct.latencies_us, 0.99), "1.00", direct.failed ? " (errors)" : "");
    std::printf("%-8zu %-8s %12.0f %10.1f %10u %10u %8.2f%s\n", size, "cordon", v_rps,
                static_cast<double>(via.bytes) / seconds / 1e6, pct(via.latencies_us, 0.5),
                pct(via.latencies_us, 0.99), d_rps > 0 ? v_rps / d_rps : 0.0,
                via.failed ? " (errors)" : "");
    std::printf("%-8zu added median latency: %d us\n", size,
                static_cast<int>(pct(via.latencies_us, 0.5)) -
                    static_cast<int>(pct(direct.latencies_us, 0.5)));
  }
  (*gw)->stop(1000);
  std::string rm = "rm -rf " + tmp;
  return std::system(rm.c_str()) == 0 ? 0 : 1;
}
