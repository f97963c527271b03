// A fake DNS server on loopback for the gateway's resolver tests (`--dns-server`): UDP and TCP
// on the same port, answers A/AAAA from a name → addresses map, and can misbehave on purpose
// (truncate over UDP, stay silent, send forged answers before the real one).
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cordon::gateway::testing {

class FakeDns {
 public:
  struct Behaviour {
    bool truncate_udp = false;  // every UDP answer is empty with TC set; TCP answers fully
    bool silent = false;        // never answers
    // Before the real answer: one with another id, one for another name, and one sent from
    // another source port; a resolver must ignore all three.
    bool forge_first = false;
  };

  FakeDns();  // 127.0.0.1, an ephemeral port (UDP and TCP)
  ~FakeDns();
  FakeDns(const FakeDns&) = delete;
  FakeDns& operator=(const FakeDns&) = delete;

  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Textual IPv4/IPv6 addresses for `name` (lower-case); unknown names get NXDOMAIN.
  void set(const std::string& name, std::vector<std::string> addresses);
  void set_behaviour(Behaviour b);
  int udp_queries() const { return udp_queries_; }
  int tcp_queries() const { return tcp_queries_; }
  // Source ports the UDP queries came from, in order.
  std::vector<uint16_t> source_ports() const;

 private:
  void loop();
  std::string answer(const std::string& query, bool truncated, bool* ok);

  int udp_fd_ = -1, tcp_fd_ = -1, forge_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> udp_queries_{0}, tcp_queries_{0};
  mutable std::mutex mu_;
  std::map<std::string, std::vector<std::string>> names_;
  Behaviour behaviour_;
  std::vector<uint16_t> source_ports_;
  std::thread thread_;
};

}  // namespace cordon::gateway::testing
