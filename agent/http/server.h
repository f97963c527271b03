// The agent's HTTP/1.1 server: one thread per connection (bounded; connections beyond the
// bound get 503 and are closed), keep-alive, chunked and Content-Length request bodies,
// Content-Length and chunked (streamed) responses. Listens on TCP and/or AF_VSOCK; both feed
// the same handler. Request heads are checked against fixed limits before a handler runs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/http/exchange.h"
#include "common/result.h"

namespace cordon::agent::http {

using Handler = std::function<void(Exchange&)>;

struct ServerLimits {
  // Each background command the SDK runs keeps one streaming connection open.
  size_t max_connections = 1024;
  size_t max_head_bytes = 16 * 1024;  // request line + headers
  size_t max_header_count = 100;
  std::chrono::milliseconds idle_timeout{120'000};  // waiting for the next request / body bytes
  std::chrono::milliseconds send_timeout{300'000};  // a client that reads nothing this long is gone
};

// Exact-path routing; unknown paths get 404 JSON.
class Router {
 public:
  void add(std::string path, Handler h);
  // Handlers tried in order before the exact table; one returns true when it took the request.
  void add_prefix(std::function<bool(Exchange&)> h);
  void dispatch(Exchange& ex) const;

 private:
  std::map<std::string, Handler, std::less<>> exact_;
  std::vector<std::function<bool(Exchange&)>> fallbacks_;
};

class Server {
 public:
  Server(Handler handler, ServerLimits limits = {});
  // Stops accepting, shuts the open connections down and waits for their threads.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // "ADDR:PORT" (IPv4, or [IPv6]:PORT); port 0 picks a free one. Returns the bound port.
  Result<uint16_t> listen_tcp(const std::string& addr_port);
  // AF_VSOCK on VMADDR_CID_ANY:port.
  Status listen_vsock(uint32_t port);

  // Starts one accept thread per listener and returns.
  void start();
  // Blocks until stop() (used by main).
  void wait();
  void stop();

  size_t active_connections() const { return active_.load(); }

 private:
  void accept_loop(int listen_fd);
  bool spawn_connection_thread(int fd);
  static void* connection_main(void* arg);  // pthread entry: serve, close, count down
  void serve_connection(int fd);

  Handler handler_;
  ServerLimits limits_;
  std::vector<int> listen_fds_;
  std::vector<std::thread> accept_threads_;
  std::atomic<size_t> active_{0};
  std::mutex conns_mu_;
  std::condition_variable conns_cv_;
  std::set<int> conns_;  // open connection sockets
  std::atomic<bool> stopping_{false};
  int stop_pipe_[2] = {-1, -1};
};

// Splits "a=b&c=d" into percent-decoded pairs (first value of a repeated key wins).
std::map<std::string, std::string> parse_query(std::string_view q);
// Percent-decodes; '+' becomes a space only when plus_is_space. nullopt on a bad escape.
std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space);

}  // namespace cordon::agent::http
