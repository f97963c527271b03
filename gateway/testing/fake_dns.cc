#include "gateway/testing/fake_dns.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

#include "gateway/stages/dns_message.h"

namespace cordon::gateway::testing {

namespace {

int bound_socket(int type, uint16_t port) {
  int fd = ::socket(AF_INET, type, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

uint16_t port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

bool read_exact(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

FakeDns::FakeDns() {
  // The same port for UDP and TCP: try ephemeral UDP ports until TCP can take the same one.
  for (int i = 0; i < 50 && tcp_fd_ < 0; ++i) {
    udp_fd_ = bound_socket(SOCK_DGRAM, 0);
    port_ = port_of(udp_fd_);
    tcp_fd_ = bound_socket(SOCK_STREAM, port_);
    if (tcp_fd_ < 0) ::close(udp_fd_);
  }
  if (tcp_fd_ < 0 || ::listen(tcp_fd_, 16) != 0) throw std::runtime_error("fake dns: bind failed");
  forge_fd_ = bound_socket(SOCK_DGRAM, 0);
  thread_ = std::thread([this] { loop(); });
}

FakeDns::~FakeDns() {
  stop_ = true;
  thread_.join();
  ::close(udp_fd_);
  ::close(tcp_fd_);
  ::close(forge_fd_);
}

void FakeDns::set(const std::string& name, std::vector<std::string> addresses) {
  std::lock_guard lk(mu_);
  names_[name] = std::move(addresses);
}

void FakeDns::set_behaviour(Behaviour b) {
  std::lock_guard lk(mu_);
  behaviour_ = b;
}

std::vector<uint16_t> FakeDns::source_ports() const {
  std::lock_guard lk(mu_);
  return source_ports_;
}

std::string FakeDns::answer(const std::string& packet, bool truncated, bool* ok) {
  auto q = parse_dns_query(packet);
  *ok = static_cast<bool>(q);
  if (!q) return {};
  std::lock_guard lk(mu_);
  auto it = names_.find(q->name);
  if (it == names_.end()) return build_dns_response(*q, DnsRcode::kNxDomain);
  if (truncated) {
    std::string r = build_dns_response(*q, DnsRcode::kNoError);
    r[2] = static_cast<char>(r[2] | 0x02);  // TC
    return r;
  }
  std::vector<std::string> raw;
  for (const auto& a : it->second) {
    unsigned char buf[16];
    if (inet_pton(AF_INET, a.c_str(), buf) == 1) raw.emplace_back(reinterpret_cast<char*>(buf), 4);
    if (inet_pton(AF_INET6, a.c_str(), buf) == 1)
      raw.emplace_back(reinterpret_cast<char*>(buf), 16);
  }
  return build_dns_response(*q, DnsRcode::kNoError, raw, 0);
}

void FakeDns::loop() {
  while (!stop_) {
    pollfd p[2] = {{udp_fd_, POLLIN, 0}, {tcp_fd_, POLLIN, 0}};
    if (::poll(p, 2, 50) <= 0) continue;
    Behaviour b;
    {
      std::lock_guard lk(mu_);
      b = behaviour_;
    }
    if (p[0].revents & POLLIN) {
      char buf[4096];
      sockaddr_in from{};
      socklen_t len = sizeof from;
      ssize_t n = ::recvfrom(udp_fd_, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n <= 0) continue;
      udp_queries_++;
      {
        std::lock_guard lk(mu_);
        source_ports_.push_back(ntohs(from.sin_port));
      }
      if (b.silent) continue;
      bool ok = false;
      std::string packet(buf, static_cast<size_t>(n));
      std::string r = answer(packet, b.truncate_udp, &ok);
      if (!ok) continue;
      auto send = [&](int fd, const std::string& data) {
        ::sendto(fd, data.data(), data.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
      };
      if (b.forge_first) {
        std::string wrong_id = r;
        wrong_id[0] = static_cast<char>(wrong_id[0] ^ 0x5a);
        send(udp_fd_, wrong_id);
        // The same id, but the question of another name (same length, so the rest lines up).
        std::string other_name = r;
        size_t at = 13;  // first byte of the first label
        if (other_name.size() > at) other_name[at] = other_name[at] == 'z' ? 'y' : 'z';
        send(udp_fd_, other_name);
        send(forge_fd_, r);  // right answer, wrong source port
      }
      send(udp_fd_, r);
    }
    if (p[1].revents & POLLIN) {
      int c = ::accept(tcp_fd_, nullptr, nullptr);
      if (c < 0) continue;
      timeval tv{2, 0};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      unsigned char l[2];
      if (read_exact(c, reinterpret_cast<char*>(l), 2)) {
        std::string packet((size_t(l[0]) << 8) | l[1], '\0');
        if (read_exact(c, packet.data(), packet.size())) {
          tcp_queries_++;
          bool ok = false;
          std::string r = answer(packet, false, &ok);
          if (ok && !b.silent) {
            std::string framed{static_cast<char>(r.size() >> 8),
                               static_cast<char>(r.size() & 0xff)};
            framed += r;
            (void)!::write(c, framed.data(), framed.size());
          }
        }
      }
      ::close(c);
    }
  }
}

}  // namespace cordon::gateway::testing
