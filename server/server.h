// The composition root of `cordon serve` (design.md §1): every long-lived part of the node,
// built from one ServerOptions, started and stopped in one order.
//
// Start order (fail closed: nothing listens until policy, vault, CA and audit are loaded):
//   1. policy store (the rules file)    2. vault   3. CA + leaf cache   4. audit writer
//   5. gateway (ports bound to 1-4, policy installed), its listeners (proxy, transparent, admin)
//   6. DNS responder (own io thread) and its sockets
//   7. vault admin API (unix socket)    8. steering service (fed with 5 and 6's sockets)
//   9. sandbox manager, with the in-process confinement (steering attach, vault registration,
//      gateway overlay), and its control socket (ManagerControlServer)
//  10. E2B API (--api-listen)          11. io threads of DNS and gateway start; reload audited
// Stop order is the reverse: E2B API, manager control socket, manager (running sandboxes keep
// running), steering (left attached: closed, not open), DNS, gateway (graceful), audit close.
//
// run() blocks the calling thread: it handles SIGHUP (reload), rules-file changes (polled
// once a second) and SIGTERM/SIGINT (stop). The caller must not have other threads that take
// those signals.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/state_dir.h"

namespace cordon::server {

struct ServerOptions {
  StateDir state;
  std::string rules;
  std::string transparent_listen, proxy_listen, admin_listen;
  std::vector<std::string> resolve;  // HOST=IP
  std::string dns_server;
  std::vector<std::string> upstream_ca;
  unsigned threads = 0;
  bool no_system_trust = false;
  std::string steering;  // none | ebpf | nftables | auto; empty = none, with a notice
  std::vector<std::string> dns_listen;
  std::string dns_synthetic_ipv4 = "198.18.0.1";
  uint32_t dns_queries_per_second = 0;
  uint32_t dns_query_burst = 0;
  // Sandboxes and the E2B API.
  bool sandboxes = false;  // run the sandbox manager (implied by api_listen)
  std::string api_listen;  // E2B API ADDR:PORT; empty = off
  std::string api_tls_cert, api_tls_key;
  std::map<std::string, uint32_t> warm_pool;  // template → prepared sandboxes
  uint32_t max_sandboxes = 64;
};

// Exit codes of run(), as the CLI's: 0 ok, 1 rules file invalid, 2 usage (bad flags), 3 failure.
struct RunOutcome {
  int exit_code = 0;
  std::string error;  // what went wrong, for the CLI to print
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Starts everything in the order above, serves until SIGTERM/SIGINT, stops in reverse.
  // Progress lines ("cordon: ... listening on ...") go to `log` (the CLI passes stderr).
  RunOutcome run(std::FILE* log);

 private:
  ServerOptions options_;
};

}  // namespace cordon::server
