// Gateway lifecycle: io workers (one io_context and thread each), listeners, TLS contexts,
// the leaf cache with its mint rate, the audit health flag, and the admin/metrics listener.
#include "gateway/gateway.h"

#include <netinet/in.h>
#include <openssl/err.h>
#include <sys/stat.h>
#include <utility>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <cstdio>

#include "gateway/detail/client_tls.h"
#include "gateway/detail/dns_client.h"
#include "gateway/detail/impl.h"
#include "gateway/detail/listen_address.h"
#include "gateway/detail/session_hooks.h"
#include "gateway/stages/credential_injector.h"

namespace cordon::gateway {

using namespace detail;
using asio::redirect_error;
using asio::use_awaitable;

// ---- streams and deadline ---------------------------------------------------------------------

namespace detail {

awaitable<size_t> PlainStream::read_some(asio::mutable_buffer b, error_code& ec) {
  co_return co_await s_.async_read_some(b, redirect_error(use_awaitable, ec));
}
awaitable<void> PlainStream::write_all(asio::const_buffer b, error_code& ec) {
  co_await asio::async_write(s_, b, redirect_error(use_awaitable, ec));
}
TlsStream::TlsStream(tcp::socket s, ssl::context& ctx) : s_(std::move(s)) {
  ssl_ = SSL_new(ctx.native_handle());
  if (!ssl_) throw std::bad_alloc();  // OpenSSL out of memory: nothing sensible remains
  // Not SSL_MODE_RELEASE_BUFFERS: that frees and reallocates the record buffers around every
  // record (a 64 KiB body is several). They are freed when the connection goes idle instead
  // (release_idle_buffers), which keeps an idle connection as small.
  SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read-ahead: one read() takes whatever the kernel has (several records), not 5 + n bytes
  // per record in two calls.
  SSL_set_read_ahead(ssl_, 1);
  error_code ec;
  s_.native_non_blocking(true, ec);
  // BIO_NOCLOSE: the descriptor stays the tcp::socket's to close.
  SSL_set_fd(ssl_, static_cast<int>(s_.native_handle()));
}

TlsStream::~TlsStream() {
  SSL_free(ssl_);
}

void TlsStream::release_idle_buffers() {
  // Refuses (returns 0) while a buffer holds unread or unsent bytes: nothing is lost.
  SSL_free_buffers(ssl_);
}

awaitable<bool> TlsStream::wait_for(int r, error_code& ec) {
  int sys = errno;  // read before any other call can change it
  switch (SSL_get_error(ssl_, r)) {
    case SSL_ERROR_WANT_READ:
      co_await s_.async_wait(tcp::socket::wait_read, redirect_error(use_awaitable, ec));
      co_return !ec;
    case SSL_ERROR_WANT_WRITE:
      co_await s_.async_wait(tcp::socket::wait_write, redirect_error(use_awaitable, ec));
      co_return !ec;
    case SSL_ERROR_ZERO_RETURN:
      ec = asio::error::eof;
      co_return false;
    case SSL_ERROR_SYSCALL:
      ec = sys != 0 ? error_code(sys, asio::error::get_system_category())
                    : error_code(asio::error::eof);
      co_return false;
    default: {
      unsigned long e = ERR_peek_last_error();
      if (ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        ec = ssl::error::stream_truncated;
      } else if (e != 0) {
        ec = error_code(static_cast<int>(e), asio::error::get_ssl_category());
      } else {
        ec = asio::error::connection_reset;
      }
      co_return false;
    }
  }
}

// SSL_get_error() reads the thread's error queue, so it must hold nothing from an earlier call.
// It is almost always empty: peeking is cheaper than ERR_clear_error()'s walk of every slot.
static void clear_stale_errors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

// Every SSL_* call below first checks that the socket is still open: the deadline closes it
// from this same thread, and the descriptor number may already belong to another connection.
awaitable<size_t> TlsStream::read_some(asio::mutable_buffer b, error_code& ec) {
  ec = {};
  while (true) {
    if (!s_.is_open()) {
      ec = asio::error::bad_descriptor;
      co_return 0;
    }
    clear_stale_errors();
    size_t n = 0;
    int r = SSL_read_ex(ssl_, b.data(), b.size(), &n);
    if (r == 1) co_return n;
    if (!co_await wait_for(r, ec)) co_return 0;
  }
}

awaitable<void> TlsStream::write_all(asio::const_buffer b, error_code& ec) {
  ec = {};
  const char* p = static_cast<const char*>(b.data());
  size_t left = b.size();
  while (left > 0) {
    if (!s_.is_open()) {
      ec = asio::error::bad_descriptor;
      co_return;
    }
    clear_stale_errors();
    size_t n = 0;
    int r = SSL_write_ex(ssl_, p, left, &n);
    if (r == 1) {
      p += n;
      left -= n;
      continue;
    }
    if (!co_await wait_for(r, ec)) co_return;
  }
}

awaitable<void> TlsStream::handshake(bool server, error_code& ec) {
  ec = {};
  if (server) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_set_connect_state(ssl_);
  }
  while (true) {
    if (!s_.is_open()) {
      ec = asio::error::bad_descriptor;
      co_return;
    }
    clear_stale_errors();
    int r = SSL_do_handshake(ssl_);
    if (r == 1) co_return;
    if (!co_await wait_for(r, ec)) co_return;
  }
}

void Deadline::start() {
  asio::co_spawn(
      timer_.get_executor(),
      [self = shared_from_this()]() -> awaitable<void> {
        while (!self->stopped_) {
          self->timer_.expires_at(self->deadline_);
          error_code ec;
          co_await self->timer_.async_wait(redirect_error(use_awaitable, ec));
          if (self->stopped_) break;
          if (self->deadline_ <= Clock::now()) {
            self->fired_ = true;
            if (self->on_expire) self->on_expire();
            self->deadline_ = Clock::time_point::max();
          }
        }
      },
      asio::detached);
}

void Metrics::observe_latency(uint64_t us) {
  double s = static_cast<double>(us) / 1e6;
  size_t i = 0;
  while (i < kBuckets && s > kBucketsSec[i]) ++i;
  latency_bucket[i]++;
  latency_sum_us += us;
  latency_count++;
}

std::string Metrics::render() const {
  std::string o;
  auto counter = [&](const char* name, const char* help, uint64_t v, const char* labels = "") {
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n";
    o += std::string(name) + labels + " " + std::to_string(v) + "\n";
  };
  counter("cordon_connections_total", "Client connections accepted.", connections_total);
  o += "# HELP cordon_connections_active Client connections open.\n"
       "# TYPE cordon_connections_active gauge\n"
       "cordon_connections_active " +
       std::to_string(connections_active.load()) + "\n";
  counter("cordon_connections_refused_total", "Connections refused before any request.",
          connections_refused);
  counter("cordon_connections_cut_total",
          "Open connections ended because the sandbox's overlay or the policy no longer permits "
          "their host.",
          connections_cut);
  o += "# HELP cordon_requests_total Requests by decision.\n# TYPE cordon_requests_total counter\n";
  o += "cordon_requests_total{decision=\"allow\"} " + std::to_string(requests_allow) + "\n";
  o += "cordon_requests_total{decision=\"deny\"} " + std::to_string(requests_deny) + "\n";
  o += "cordon_requests_total{decision=\"error\"} " + std::to_string(requests_error) + "\n";
  o += "# HELP cordon_bytes_total Body bytes forwarded.\n# TYPE cordon_bytes_total counter\n";
  o += "cordon_bytes_total{direction=\"up\"} " + std::to_string(bytes_up) + "\n";
  o += "cordon_bytes_total{direction=\"down\"} " + std::to_string(bytes_down) + "\n";
  counter("cordon_upstream_errors_total", "Upstream connect, TLS or protocol failures.",
          upstream_errors);
  counter("cordon_upstream_connects_total", "New upstream connections.", upstream_connects);
  counter("cordon_upstream_reused_total", "Requests served on a pooled upstream connection.",
          upstream_reused);
  counter("cordon_upstream_tls_resumed_total", "Upstream TLS handshakes resumed.", tls_resumed);
  counter("cordon_cert_mints_total", "Leaf certificates minted.", cert_mints);
  counter("cordon_cert_mints_refused_total", "Leaf mints refused by the mint rate.",
          cert_mint_refused);
  counter("cordon_audit_failures_total", "Audit appends that failed.", audit_failures);
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n";
    o += std::string(name) + " " + std::to_string(v) + "\n";
  };
  gauge("cordon_upstream_pool_idle", "Idle upstream connections kept for reuse.", pool_idle);
  gauge("cordon_upstream_tls_sessions", "Upstream TLS sessions kept for resumption.", tls_sessions);
  if (audit_disk_bytes.load() >= 0)
    gauge("cordon_audit_disk_bytes", "Bytes the audit log files take on disk.", audit_disk_bytes);
  o += "# HELP cordon_reloads_total Policy reloads by outcome.\n# TYPE cordon_reloads_total "
       "counter\n";
  o += "cordon_reloads_total{result=\"ok\"} " + std::to_string(reloads_ok) + "\n";
  o += "cordon_reloads_total{result=\"failed\"} " + std::to_string(reloads_failed) + "\n";
  o += "# HELP cordon_request_duration_seconds Request latency through the gateway.\n"
       "# TYPE cordon_request_duration_seconds histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i <= kBuckets; ++i) {
    cum += latency_bucket[i];
    char le[32];
    if (i < kBuckets) {
      std::snprintf(le, sizeof le, "%g", kBucketsSec[i]);
    } else {
      std::snprintf(le, sizeof le, "+Inf");
    }
    o += std::string("cordon_request_duration_seconds_bucket{le=\"") + le + "\"} " +
         std::to_string(cum) + "\n";
  }
  char sum[64];
  std::snprintf(sum, sizeof sum, "%.6f", static_cast<double>(latency_sum_us) / 1e6);
  o += std::string("cordon_request_duration_seconds_sum ") + sum + "\n";
  o += "cordon_request_duration_seconds_count " + std::to_string(latency_count) + "\n";
  return o;
}

}  // namespace detail

// ---- Impl -------------------------------------------------------------------------------------

Gateway::Impl::~Impl() {
  for (auto& c : session_lru) SSL_SESSION_free(c.session);
}

Result<LeafCert> Gateway::Impl::leaf_for(const std::string& sni) {
  // No cache of its own: the provider's is the only one (it renews leaves before they expire,
  // a copy here would hand them out expired), and its budget the only mint budget.
  auto leaf = ports.certs->leaf_for(sni);
  if (!leaf) {
    if (leaf.error().code == kCertMintRateLimited) metrics.cert_mint_refused++;
    return leaf;
  }
  if (leaf->minted) metrics.cert_mints++;
  return leaf;
}

bool Gateway::Impl::audit(AuditRecord& rec, const std::vector<std::string>* secrets) {
  static const std::vector<std::string> kNone;
  // The sandbox controls most of these (target, Host, SNI, method); the rest are cordon's own
  // words, cheap to check (short texts are skipped at once).
  for (std::string* f :
       {&rec.sandbox, &rec.src, &rec.dst, &rec.sni, &rec.host, &rec.method, &rec.path,
        &rec.destination, &rec.route, &rec.rule, &rec.reason, &rec.credential, &rec.token_id}) {
    if (!f->empty()) redact_for_audit(*f, secrets ? *secrets : kNone);
  }
  Status s = ports.audit->append(rec);
  if (!s) {
    metrics.audit_failures++;
    audit_failed = true;
    return false;
  }
  audit_failed = false;
  return true;
}

std::shared_ptr<LiveConnection> Gateway::Impl::open_connection(
    const SandboxInfo& sandbox, const std::string& src, const std::shared_ptr<Deadline>& deadline,
    std::unique_ptr<ByteStream>* client) {
  // Weak: the hook may be posted after the connection ended (LiveConnection::close skips it
  // then, and the deadline may be gone).
  std::weak_ptr<Deadline> weak = deadline;
  return connections->open(sandbox, src, deadline->executor(), [weak, client] {
    if (client && *client && (*client)->socket().is_open()) {
      // Abortive (RST): what the gateway already queued for the client is dropped, or a slow
      // reader would go on reading it for as long as the kernel buffers hold.
      error_code ec;
      (*client)->socket().set_option(asio::socket_base::linger(true, 0), ec);
    }
    if (auto d = weak.lock()) d->cut();
  });
}

void Gateway::Impl::store_session(const std::string& key, SSL_SESSION* s) {
  std::lock_guard lk(session_mu);
  if (auto it = sessions.find(key); it != sessions.end()) {
    SSL_SESSION_free(it->second->session);
    it->second->session = s;
    session_lru.splice(session_lru.begin(), session_lru, it->second);
    return;
  }
  session_lru.push_front(CachedSession{key, s});
  sessions.emplace(key, session_lru.begin());
  size_t cap = std::max<size_t>(1, options.limits.tls_session_cache_entries);
  while (session_lru.size() > cap) {
    SSL_SESSION_free(session_lru.back().session);
    sessions.erase(session_lru.back().key);
    session_lru.pop_back();
  }
  metrics.tls_sessions = static_cast<int64_t>(session_lru.size());
}

SSL_SESSION* Gateway::Impl::get_session(const std::string& key) {
  std::lock_guard lk(session_mu);
  auto it = sessions.find(key);
  if (it == sessions.end()) return nullptr;
  SSL_SESSION* s = it->second->session;
  if (!SSL_SESSION_is_resumable(s)) return nullptr;
  session_lru.splice(session_lru.begin(), session_lru, it->second);
  SSL_SESSION_up_ref(s);
  return s;
}

awaitable<void> Gateway::Impl::sweep_pool(Worker& worker) {
  uint32_t timeout = options.limits.pool_idle_timeout_ms;
  // A connection lives at most a quarter period past its timeout; at most 4 wake-ups a second.
  auto period = std::chrono::milliseconds(std::clamp<uint32_t>(timeout / 4, 250, 5000));
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!stopping) {
    timer.expires_after(period);
    error_code ec;
    co_await timer.async_wait(redirect_error(use_awaitable, ec));
    worker.pool.sweep(Clock::now());
  }
}

// ---- TLS callbacks ----------------------------------------------------------------------------

namespace {

int servername_cb(SSL* ssl, int* alert, void* arg) {
  auto* impl = static_cast<Gateway::Impl*>(arg);
  auto* hs = static_cast<HandshakeState*>(SSL_get_ex_data(ssl, impl->handshake_ex_index));
  if (!hs) {
    *alert = SSL_AD_INTERNAL_ERROR;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  // Decided again inside the handshake: the SNI is what the leaf will be minted for.
  TlsFacts facts;
  facts.phase = TlsPhase::kHandshake;
  if (const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name)) facts.sni = name;
  if (!hs->expected_host.empty()) facts.connect_host = hs->expected_host;
  facts.port = hs->port;
  auto policy = impl->current_policy();
  TlsChoice choice = choose_client_tls(policy.get(), hs->profile, hs->overlay.get(), facts);
  hs->sni = choice.decision.host;
  if (choice.decision.action != TlsAction::kIntercept) {
    hs->refusal = std::string(choice.decision.reason());
    *alert = choice.decision.refusal == TlsRefusal::kPolicyNotLoaded ? SSL_AD_INTERNAL_ERROR
                                                                     : SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  auto leaf = impl->leaf_for(hs->sni);
  if (!leaf) {
    hs->refusal =
        leaf.error().code == kCertMintRateLimited ? "cert_mint_rate_limited" : "leaf_unavailable";
    *alert = SSL_AD_INTERNAL_ERROR;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  if (SSL_use_certificate(ssl, leaf->cert.get()) != 1 ||
      SSL_use_PrivateKey(ssl, leaf->key.get()) != 1) {
    hs->refusal = "leaf_rejected";
    *alert = SSL_AD_INTERNAL_ERROR;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  for (const auto& c : leaf->chain) SSL_add1_chain_cert(ssl, c.get());
  return SSL_TLSEXT_ERR_OK;
}

// Our preference, whatever the client's order: h2 (when GatewayOptions::http2), then
// http/1.1. A client offering neither gets no ALPN (and speaks HTTP/1.1 or fails).
int alpn_cb(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
            unsigned int inlen, void* arg) {
  auto* impl = static_cast<Gateway::Impl*>(arg);
  auto offered = [&](std::string_view proto) {
    unsigned i = 0;
    while (i < inlen) {
      unsigned len = in[i];
      if (i + 1 + len > inlen) break;
      if (len == proto.size() && std::memcmp(in + i + 1, proto.data(), len) == 0) {
        *out = in + i + 1;
        *outlen = static_cast<unsigned char>(len);
        return true;
      }
      i += 1 + len;
    }
    return false;
  };
  if (impl && impl->options.http2 && offered("h2")) return SSL_TLSEXT_ERR_OK;
  if (offered("http/1.1")) return SSL_TLSEXT_ERR_OK;
  return SSL_TLSEXT_ERR_NOACK;
}

int g_session_impl_index = -1;

int new_session_cb(SSL* ssl, SSL_SESSION* sess) {
  auto* impl =
      static_cast<Gateway::Impl*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), g_session_impl_index));
  auto* key = static_cast<std::string*>(SSL_get_ex_data(ssl, impl->session_key_ex_index));
  if (!key) return 0;
  impl->store_session(*key, sess);
  return 1;  // we keep the reference
}

void free_key(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::string*>(ptr);
}

}  // namespace

// ---- Gateway --------------------------------------------------------------------------------

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() {
  stop(0);
  // Sockets before their io_contexts, io_contexts (and the coroutine frames they still hold,
  // whose guards use the mutexes below) before the rest of Impl.
  impl_->proxy_acceptors.clear();
  impl_->transparent_acceptors.clear();
  impl_->admin_tcp.reset();
  impl_->admin_unix.reset();
  impl_->workers.clear();
}

Result<std::unique_ptr<Gateway>> Gateway::create(GatewayOptions options, GatewayPorts ports) {
  if (!ports.certs || !ports.sandboxes || !ports.credentials || !ports.audit) {
    return fail("gateway: every port (certs, sandboxes, credentials, audit) must be set");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->ports = std::move(ports);
  impl->blocking = std::make_unique<detail::BlockingPool>();
  GatewayConfig initial;  // no policy yet: fail closed
  initial.runtime =
      RuntimeOptions{impl->options.limits, impl->options.h2, impl->options.deny_on_audit_failure};
  impl->config = std::make_shared<ConfigSource>(std::move(initial));
  impl->connections = std::make_unique<detail::ConnectionRegistry>(
      impl->options.limits.max_connections_per_sandbox);
  if (!impl->options.dns_server.empty()) {
    auto server = parse_dns_server(impl->options.dns_server);
    if (!server) return with_context("gateway: --dns-server", server.error());
    impl->dns_server = *server;
  }
  unsigned n = impl->options.threads ? impl->options.threads : std::thread::hardware_concurrency();
  if (n == 0) n = 1;
  const Limits& lim = impl->options.limits;
  size_t share = std::max<size_t>(1, lim.pool_max_idle_total / n);
  for (unsigned i = 0; i < n; ++i) {
    impl->workers.push_back(std::make_unique<Worker>());
    impl->workers.back()->pool.configure(share, lim.pool_max_idle_per_key, lim.pool_idle_timeout_ms,
                                         &impl->metrics.pool_idle);
  }

  impl->handshake_ex_index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  impl->session_key_ex_index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, &free_key);
  if (g_session_impl_index < 0) {
    g_session_impl_index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  }

  try {
    impl->server_tls = std::make_unique<ssl::context>(ssl::context::tls_server);
    SSL_CTX* sctx = impl->server_tls->native_handle();
    SSL_CTX_set_min_proto_version(sctx, TLS1_2_VERSION);
    SSL_CTX_set_options(sctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    SSL_CTX_set_tlsext_servername_callback(sctx, &servername_cb);
    SSL_CTX_set_tlsext_servername_arg(sctx, impl.get());
    SSL_CTX_set_alpn_select_cb(sctx, &alpn_cb, impl.get());

    impl->upstream_tls = std::make_unique<ssl::context>(ssl::context::tls_client);
    SSL_CTX* cctx = impl->upstream_tls->native_handle();
    SSL_CTX_set_min_proto_version(cctx, TLS1_2_VERSION);
    if (impl->options.system_trust_store) impl->upstream_tls->set_default_verify_paths();
    for (const auto& f : impl->options.upstream_ca_files) {
      boost::system::error_code ec;
      impl->upstream_tls->load_verify_file(f, ec);
      if (ec) return fail("gateway: loading upstream CA file " + f + ": " + ec.message());
    }
    impl->upstream_tls->set_verify_mode(ssl::verify_peer);
    static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(cctx, kAlpn, sizeof kAlpn);
    SSL_CTX_set_session_cache_mode(cctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(cctx, &new_session_cb);
    SSL_CTX_set_ex_data(cctx, g_session_impl_index, impl.get());
  } catch (const boost::system::system_error& e) {
    return fail(std::string("gateway: TLS setup: ") + e.what());
  }
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

void Gateway::set_config(GatewayConfig config) {
  impl_->config->publish(std::move(config));
}

void Gateway::set_policy(std::shared_ptr<const PolicyView> policy) {
  impl_->config->update([&](GatewayConfig& c) { c.policy = std::move(policy); });
}

void Gateway::set_config(std::shared_ptr<const PolicyView> policy, RuntimeOptions runtime) {
  impl_->config->update([&](GatewayConfig& c) {
    c.policy = std::move(policy);
    c.runtime = std::move(runtime);
  });
}

std::shared_ptr<ConfigSource> Gateway::config_source() const {
  return impl_->config;
}

std::size_t Gateway::end_refused_connections(std::string_view sandbox_id) {
  auto policy = impl_->current_policy();
  std::size_t ended = 0;
  // A copy of the entries: the checks below call the policy and overlay, the audit writes.
  for (const auto& conn : impl_->connections->of(sandbox_id)) {
    auto dest = conn->destination();
    if (!dest || conn->cut()) continue;
    const SandboxInfo& sb = conn->sandbox();
    bool in_policy = policy && policy->destination(sb.profile, dest->host, dest->port);
    bool in_overlay = !sb.overlay || sb.overlay->permits(dest->host);
    if ((in_policy && in_overlay) || !conn->claim_cut()) continue;
    conn->close();
    AuditRecord r;
    r.kind = AuditKind::kConnectionCut;
    r.request_id = make_request_id();
    r.sandbox = sb.id;
    r.src = conn->src();
    r.dst = dest->host + ":" + std::to_string(dest->port);
    r.host = dest->host;
    r.decision = AuditDecision::kDeny;
    r.rule = in_overlay ? "default-deny" : "network_overlay";
    r.reason = in_overlay ? "policy_refuses" : "network_overlay_narrowed";
    impl_->metrics.connections_cut++;
    impl_->audit(r);
    ++ended;
  }
  return ended;
}

void Gateway::note_reload(bool ok) {
  (ok ? impl_->metrics.reloads_ok : impl_->metrics.reloads_failed)++;
}

std::string Gateway::metrics_text() const {
  impl_->metrics.audit_disk_bytes = impl_->ports.audit->disk_bytes();
  return impl_->metrics.render();
}

namespace {

Result<tcp::endpoint> parse_listen(const std::string& addr) {
  auto la = detail::parse_listen_address(addr, "listen address");
  if (!la) return fail(la.error());
  return tcp::endpoint(la->ip, la->port);
}

Result<std::unique_ptr<tcp::acceptor>> open_acceptor(asio::io_context& ctx, const std::string& addr,
                                                     bool transparent) {
  auto ep = parse_listen(addr);
  if (!ep) return fail(ep.error());
  auto acc = std::make_unique<tcp::acceptor>(ctx);
  boost::system::error_code ec;
  acc->open(ep->protocol(), ec);
  if (!ec) acc->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && transparent) {
    if (auto st = detail::set_ip_transparent(acc->native_handle(), ep->address().is_v6(),
                                             "listen " + addr);
        !st)
      return fail(st.error());
  }
  if (!ec) acc->bind(*ep, ec);
  if (!ec) acc->listen(1024, ec);
  if (ec) return fail("listen " + addr + ": " + ec.message());
  return acc;
}

}  // namespace

Result<uint16_t> Gateway::listen_proxy(const std::string& addr) {
  auto acc = open_acceptor(impl_->workers[0]->ctx, addr, false);
  if (!acc) return fail(acc.error());
  uint16_t port = (*acc)->local_endpoint().port();
  impl_->proxy_acceptors.push_back(std::move(*acc));
  return port;
}

Result<uint16_t> Gateway::listen_transparent(const std::string& addr) {
  auto acc = open_acceptor(impl_->workers[0]->ctx, addr, true);
  if (!acc) return fail(acc.error());
  uint16_t port = (*acc)->local_endpoint().port();
  impl_->transparent_acceptors.push_back(std::move(*acc));
  return port;
}

std::vector<std::pair<int, bool>> Gateway::transparent_listener_fds() const {
  std::vector<std::pair<int, bool>> out;
  for (const auto& a : impl_->transparent_acceptors) {
    error_code ec;
    auto ep = a->local_endpoint(ec);
    out.emplace_back(a->native_handle(), !ec && ep.address().is_v6());
  }
  return out;
}

awaitable<void> Gateway::Impl::accept_loop(tcp::acceptor& acc, bool transparent) {
  while (!stopping) {
    Worker& w = pick_worker();
    error_code ec;
    tcp::socket sock = co_await acc.async_accept(w.ctx, redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acc.is_open()) co_return;
      continue;  // e.g. EMFILE: keep serving the others
    }
    if (transparent) {
      asio::co_spawn(w.ctx, transparent_session(std::move(sock)), asio::detached);
    } else {
      asio::co_spawn(w.ctx, proxy_session(std::move(sock)), asio::detached);
    }
  }
}

// ---- admin ------------------------------------------------------------------------------------

namespace {

template <class Socket>
awaitable<void> admin_session(Gateway::Impl* impl, Socket sock) {
  std::string req;
  char buf[1024];
  auto timer = std::make_shared<asio::steady_timer>(sock.get_executor());
  timer->expires_after(std::chrono::seconds(5));
  timer->async_wait([&sock](error_code ec) {
    if (!ec) sock.close(ec);
  });
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 8192) {
    error_code ec;
    size_t n = co_await sock.async_read_some(asio::buffer(buf), redirect_error(use_awaitable, ec));
    if (ec) {
      timer->cancel();
      co_return;
    }
    req.append(buf, n);
  }
  timer->cancel();
  std::string status = "404 Not Found", body = "not found\n", type = "text/plain";
  if (req.rfind("GET /healthz ", 0) == 0) {
    if (impl->current_policy()) {
      status = "200 OK";
      body = "ok\n";
    } else {
      status = "503 Service Unavailable";
      body = "policy not loaded\n";
    }
  } else if (req.rfind("GET /metrics ", 0) == 0) {
    status = "200 OK";
    impl->metrics.audit_disk_bytes = impl->ports.audit->disk_bytes();
    body = impl->metrics.render();
    type = "text/plain; version=0.0.4";
  }
  std::string out = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n\r\n" + body;
  error_code ec;
  co_await asio::async_write(sock, asio::buffer(out), redirect_error(use_awaitable, ec));
  sock.close(ec);
}

template <class Acceptor>
awaitable<void> admin_accept(Gateway::Impl* impl, Acceptor& acc) {
  while (!impl->stopping) {
    error_code ec;
    auto sock = co_await acc.async_accept(redirect_error(use_awaitable, ec));
    if (ec) {
      if (!acc.is_open()) co_return;
      continue;
    }
    asio::co_spawn(acc.get_executor(), admin_session(impl, std::move(sock)), asio::detached);
  }
}

}  // namespace

Result<std::string> Gateway::listen_admin(const std::string& addr) {
  auto& ctx = impl_->workers[0]->ctx;
  if (addr.rfind("unix:", 0) == 0) {
    std::string path = addr.substr(5);
    ::unlink(path.c_str());
    auto acc = std::make_unique<asio::local::stream_protocol::acceptor>(ctx);
    boost::system::error_code ec;
    acc->open(asio::local::stream_protocol(), ec);
    mode_t old = ::umask(0077);  // 0600 from birth: no window where others could connect
    if (!ec) acc->bind(asio::local::stream_protocol::endpoint(path), ec);
    ::umask(old);
    if (!ec) acc->listen(64, ec);
    if (ec) return fail("admin listen " + addr + ": " + ec.message());
    impl_->admin_unix = std::move(acc);
    impl_->admin_unix_path = path;
    return addr;
  }
  auto ep = parse_listen(addr);
  if (!ep) return fail(ep.error());
  if (!ep->address().is_loopback()) {
    return fail("admin listen " + addr + ": must be a loopback address or unix:PATH");
  }
  auto acc = open_acceptor(ctx, addr, false);
  if (!acc) return fail(acc.error());
  auto bound = (*acc)->local_endpoint();
  impl_->admin_tcp = std::move(*acc);
  return bound.address().to_string() + ":" + std::to_string(bound.port());
}

void Gateway::start() {
  if (impl_->started) return;
  impl_->started = true;
  auto& ctx0 = impl_->workers[0]->ctx;
  for (auto& a : impl_->proxy_acceptors) {
    asio::co_spawn(ctx0, impl_->accept_loop(*a, false), asio::detached);
  }
  for (auto& a : impl_->transparent_acceptors) {
    asio::co_spawn(ctx0, impl_->accept_loop(*a, true), asio::detached);
  }
  if (impl_->admin_tcp)
    asio::co_spawn(ctx0, admin_accept(impl_.get(), *impl_->admin_tcp), asio::detached);
  if (impl_->admin_unix)
    asio::co_spawn(ctx0, admin_accept(impl_.get(), *impl_->admin_unix), asio::detached);
  for (auto& w : impl_->workers) {
    asio::co_spawn(w->ctx, impl_->sweep_pool(*w), asio::detached);
  }
  for (auto& w : impl_->workers) {
    Worker* wp = w.get();
    wp->thread = std::thread([wp] {
      auto guard = asio::make_work_guard(wp->ctx);
      wp->ctx.run();
    });
  }
}

void Gateway::stop(unsigned grace_ms) {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  auto& ctx0 = impl_->workers[0]->ctx;
  auto close_all = [impl = impl_.get()] {
    error_code ec;
    for (auto& a : impl->proxy_acceptors) a->close(ec);
    for (auto& a : impl->transparent_acceptors) a->close(ec);
    if (impl->admin_tcp) impl->admin_tcp->close(ec);
    if (impl->admin_unix) impl->admin_unix->close(ec);
  };
  if (impl_->started) {
    asio::post(ctx0, close_all);
    auto until = Clock::now() + std::chrono::milliseconds(grace_ms);
    while (impl_->metrics.connections_active.load() > 0 && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (auto& w : impl_->workers) w->ctx.stop();
    for (auto& w : impl_->workers) {
      if (w->thread.joinable()) w->thread.join();
    }
  } else {
    close_all();
  }
  // Vault lookups still running finish and post their results to the stopped io_contexts,
  // where they are destroyed with the coroutines waiting for them.
  impl_->blocking->join();
  // Pooled upstream connections and sessions die with their io_contexts.
  for (auto& w : impl_->workers) w->pool.clear();
  if (!impl_->admin_unix_path.empty()) ::unlink(impl_->admin_unix_path.c_str());
}

}  // namespace cordon::gateway
