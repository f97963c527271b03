// Internals of the gateway shared by its .cc files: the Impl state, the byte-stream
// abstraction over plain and TLS sockets, deadlines, metrics. Not a public header.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gateway/detail/blocking_pool.h"
#include "gateway/detail/live_connections.h"
#include "gateway/gateway.h"
#include "gateway/h2/protocol_cache.h"
#include "gateway/request_pipeline.h"

namespace cordon::gateway::detail {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;
template <class T>
using awaitable = asio::awaitable<T>;
using Clock = std::chrono::steady_clock;

// A byte stream, plain or TLS, so that the HTTP code is written once.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  virtual awaitable<size_t> read_some(asio::mutable_buffer b, error_code& ec) = 0;
  virtual awaitable<void> write_all(asio::const_buffer b, error_code& ec) = 0;
  virtual tcp::socket& socket() = 0;
  virtual SSL* ssl() { return nullptr; }
  // Frees the buffers the stream holds when nothing is pending in them (an idle connection);
  // they come back on the next read or write.
  virtual void release_idle_buffers() {}
};

class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(tcp::socket s) : s_(std::move(s)) {}
  awaitable<size_t> read_some(asio::mutable_buffer b, error_code& ec) override;
  awaitable<void> write_all(asio::const_buffer b, error_code& ec) override;
  tcp::socket& socket() override { return s_; }

 private:
  tcp::socket s_;
};

// TLS straight on the non-blocking socket (OpenSSL's socket BIO, read-ahead on), with Asio
// only for readiness. Unlike asio::ssl::stream there is no BIO pair in between: one copy less
// each way, no four zero-filled 17 KiB buffers per connection, and OpenSSL's record buffers
// are given back while a client connection is idle (release_idle_buffers; 10,000 idle
// connections). Pooled upstream connections keep theirs (the pool is bounded).
// One read and one write may be in flight at once (tunnels), as with asio::ssl::stream.
class TlsStream final : public ByteStream {
 public:
  TlsStream(tcp::socket s, ssl::context& ctx);
  ~TlsStream() override;
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;
  awaitable<size_t> read_some(asio::mutable_buffer b, error_code& ec) override;
  awaitable<void> write_all(asio::const_buffer b, error_code& ec) override;
  // Runs the handshake as server (client side: set SNI/verification on ssl() first).
  awaitable<void> handshake(bool server, error_code& ec);
  tcp::socket& socket() override { return s_; }
  SSL* ssl() override { return ssl_; }
  void release_idle_buffers() override;

 private:
  // After an SSL_* call returned r <= 0: waits for the readiness it asks for. False = give up
  // (ec set).
  awaitable<bool> wait_for(int r, error_code& ec);
  tcp::socket s_;
  SSL* ssl_ = nullptr;
};

// One timer per connection; when it fires, on_expire closes the sockets (Beast-style
// timeouts: the phase sets the deadline, expiry ends the connection).
class Deadline : public std::enable_shared_from_this<Deadline> {
 public:
  explicit Deadline(asio::any_io_executor ex) : timer_(ex) {}
  void start();
  void expires_after_ms(uint32_t ms) {
    auto d = Clock::now() + std::chrono::milliseconds(ms);
    bool earlier = d < deadline_;
    deadline_ = d;
    // The watchdog sleeps until the old deadline; wake it so that it re-arms for the earlier one.
    if (earlier) timer_.cancel();
  }
  void disarm() { deadline_ = Clock::time_point::max(); }
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }
  bool fired() const { return fired_; }
  // Ends the connection now, as an expiry would (a cut: Gateway::end_refused_connections). On
  // the deadline's io thread; nothing once stopped (its connection is gone).
  void cut() {
    if (stopped_) return;
    fired_ = true;
    if (on_expire) on_expire();
  }
  asio::any_io_executor executor() { return timer_.get_executor(); }
  std::function<void()> on_expire;

 private:
  asio::steady_timer timer_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool stopped_ = false;
  bool fired_ = false;
};

struct Metrics {
  std::atomic<uint64_t> connections_total{0};
  std::atomic<int64_t> connections_active{0};
  std::atomic<uint64_t> connections_refused{0};
  std::atomic<uint64_t> connections_cut{0};  // open connections ended by an overlay change
  std::atomic<uint64_t> requests_allow{0};
  std::atomic<uint64_t> requests_deny{0};
  std::atomic<uint64_t> requests_error{0};
  std::atomic<uint64_t> bytes_up{0};
  std::atomic<uint64_t> bytes_down{0};
  std::atomic<uint64_t> upstream_errors{0};
  std::atomic<uint64_t> upstream_connects{0};
  std::atomic<uint64_t> upstream_reused{0};
  std::atomic<uint64_t> tls_resumed{0};
  std::atomic<uint64_t> cert_mints{0};
  std::atomic<uint64_t> cert_mint_refused{0};
  std::atomic<uint64_t> audit_failures{0};
  std::atomic<uint64_t> reloads_ok{0};
  std::atomic<uint64_t> reloads_failed{0};
  std::atomic<int64_t> pool_idle{0};     // idle upstream connections, all io threads
  std::atomic<int64_t> tls_sessions{0};  // upstream TLS sessions kept for resumption
  // Bytes the audit log takes on disk, from the sink (negative: the sink cannot tell).
  std::atomic<int64_t> audit_disk_bytes{-1};
  static constexpr double kBucketsSec[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                           0.1,    0.25,  0.5,    1,     2.5,  5,     10};
  static constexpr size_t kBuckets = sizeof(kBucketsSec) / sizeof(kBucketsSec[0]);
  std::atomic<uint64_t> latency_bucket[kBuckets + 1]{};
  std::atomic<uint64_t> latency_sum_us{0};
  std::atomic<uint64_t> latency_count{0};
  void observe_latency(uint64_t us);
  std::string render() const;
};

struct UpstreamConn {
  std::unique_ptr<ByteStream> stream;
  std::string key;
  Clock::time_point idle_since;
};

// The idle upstream connections of one io thread (gateway/detail/upstream_pool.cc): bounded in
// total and per key (LRU), closed as soon as the upstream closes them (or sends anything
// unasked), and after an idle timeout. A stream of distinct names (a `**.` wildcard) therefore
// keeps at most the total cap of sockets, never one CLOSE-WAIT socket per name. Used only from
// its io thread; cleared while its io_context still exists (the watches are operations on it).
class UpstreamPool {
 public:
  UpstreamPool() = default;
  ~UpstreamPool() { clear(); }
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // Caps (each at least 1) and the idle timeout; `gauge` (may be null) follows size().
  void configure(size_t max_total, size_t max_per_key, uint32_t idle_timeout_ms,
                 std::atomic<int64_t>* gauge);

  // The most recently returned idle connection for `key` that has not timed out, or null.
  // (Whether its socket is still clean is the caller's check: the watch may not have run yet.)
  std::unique_ptr<UpstreamConn> take(const std::string& key, Clock::time_point now);
  // Keeps `conn` idle (its key is conn->key) and watches its socket. Past a cap the least
  // recently used connection (of the key, or overall) is closed.
  void put(std::unique_ptr<UpstreamConn> conn, Clock::time_point now);
  // Closes the connections idle for longer than the timeout.
  void sweep(Clock::time_point now);
  void clear();

  size_t size() const { return lru_.size(); }
  size_t keys() const { return by_key_.size(); }

 private:
  struct Entry {
    std::unique_ptr<UpstreamConn> conn;
    uint64_t id = 0;
  };
  using Iter = std::list<Entry>::iterator;
  // Removes an entry from every index; returns its connection (the caller keeps or drops it).
  std::unique_ptr<UpstreamConn> unlink(Iter it);
  void drop(uint64_t id);
  void watch(Entry& e);
  void update_gauge();

  size_t max_total_ = 1, max_per_key_ = 1;
  uint32_t idle_timeout_ms_ = 30'000;
  std::atomic<int64_t>* gauge_ = nullptr;
  int64_t reported_ = 0;
  uint64_t next_id_ = 1;
  std::list<Entry> lru_;                                       // front = most recently returned
  std::unordered_map<std::string, std::vector<Iter>> by_key_;  // back = most recent
  std::unordered_map<uint64_t, Iter> by_id_;
};

struct Worker {
  asio::io_context ctx{1};
  // Idle upstream connections, used only from this worker's thread. After ctx: destroyed first.
  UpstreamPool pool;
  std::thread thread;
};

// What the TLS callbacks need to know about the connection being handshaken.
struct HandshakeState {
  Gateway::Impl* impl = nullptr;
  std::string expected_host;  // CONNECT authority host; empty in transparent mode
  std::string profile;        // the SNI must be a destination of it
  std::shared_ptr<const SandboxOverlay> overlay;  // and the overlay must permit it (null: none)
  uint16_t port = 443;
  std::string sni;      // set when accepted
  std::string refusal;  // set when refused
};

}  // namespace cordon::gateway::detail

namespace cordon::gateway {

struct Gateway::Impl {
  GatewayOptions options;
  GatewayPorts ports;
  // Where vault lookups that would block (cache miss, due change check) run, never on an io
  // thread. Joined by stop() after the io threads.
  std::unique_ptr<detail::BlockingPool> blocking;
  detail::Metrics metrics;

  // The policy and the reloadable options, one snapshot swapped as a whole (set_config), and
  // read by the DNS responder too (gateway/config.h). A connection or request takes it once
  // and keeps what it took.
  using ConfigSnapshot = GatewayConfig;
  std::shared_ptr<ConfigSource> config;  // never null after create()
  std::shared_ptr<const ConfigSnapshot> current_config() const { return config->current(); }
  std::shared_ptr<const PolicyView> current_policy() const {
    auto c = current_config();
    // Shares the snapshot's ownership: one reference count for both.
    return c->policy ? std::shared_ptr<const PolicyView>(c, c->policy.get()) : nullptr;
  }

  // Parsed GatewayOptions::dns_server, when set.
  std::optional<detail::asio::ip::udp::endpoint> dns_server;

  std::unique_ptr<detail::ssl::context> server_tls;
  std::unique_ptr<detail::ssl::context> upstream_tls;
  int handshake_ex_index = -1;
  int session_key_ex_index = -1;

  std::vector<std::unique_ptr<detail::Worker>> workers;
  std::atomic<size_t> next_worker{0};
  std::vector<std::unique_ptr<detail::tcp::acceptor>> proxy_acceptors;
  std::vector<std::unique_ptr<detail::tcp::acceptor>> transparent_acceptors;
  std::unique_ptr<detail::tcp::acceptor> admin_tcp;
  std::unique_ptr<detail::asio::local::stream_protocol::acceptor> admin_unix;
  std::string admin_unix_path;
  std::atomic<bool> stopping{false};
  bool started = false;

  // Audit health: set when an append fails, cleared when one succeeds.
  std::atomic<bool> audit_failed{false};

  // TLS session cache for upstreams, by "host:port": LRU (front = most recent), bounded by
  // Limits::tls_session_cache_entries.
  std::mutex session_mu;
  struct CachedSession {
    std::string key;
    SSL_SESSION* session;
  };
  std::list<CachedSession> session_lru;
  std::unordered_map<std::string, std::list<CachedSession>::iterator> sessions;
  // What each upstream chose by ALPN when offered h2 (HTTP/2 clients only; bounded, LRU).
  h2::ProtocolCache upstream_protocols;

  // Open client connections per sandbox (bounded by Limits::max_connections_per_sandbox).
  std::unique_ptr<detail::ConnectionRegistry> connections;

  ~Impl();
  detail::Worker& pick_worker() { return *workers[next_worker++ % workers.size()]; }
  Result<LeafCert> leaf_for(const std::string& sni);
  // False if the line may be lost: counted, and every later request is refused until an
  // append succeeds again (deny_on_audit_failure). Every string field is redacted first: no
  // proxy token and none of `secrets` (the values known for this request) reaches the log.
  bool audit(AuditRecord& rec, const std::vector<std::string>* secrets = nullptr);
  // False once an append failed (until one succeeds) or while the sink says it cannot write:
  // asked before forwarding, so the request that meets the failure is itself denied.
  bool audit_ready() const { return !audit_failed.load() && ports.audit->health(); }
  // The slot of a new client connection of `sandbox` from `src`, which a cut ends through
  // `deadline` (Deadline::cut), resetting `*client` (the session's client stream, which must
  // outlive the slot). Null: the sandbox has its limit of connections open. The session
  // removes it (connections->remove) on its io thread as the connection ends.
  std::shared_ptr<detail::LiveConnection> open_connection(
      const SandboxInfo& sandbox, const std::string& src,
      const std::shared_ptr<detail::Deadline>& deadline,
      std::unique_ptr<detail::ByteStream>* client);
  void store_session(const std::string& key, SSL_SESSION* s);
  SSL_SESSION* get_session(const std::string& key);

  detail::awaitable<void> accept_loop(detail::tcp::acceptor& acc, bool transparent);
  // Closes a worker's idle upstream connections past the idle timeout, until stop.
  detail::awaitable<void> sweep_pool(detail::Worker& worker);
  detail::awaitable<void> proxy_session(detail::tcp::socket sock);
  detail::awaitable<void> transparent_session(detail::tcp::socket sock);
};

}  // namespace cordon::gateway
