// cordon's gateway: the Boost.Asio data path (design.md §2). It owns the listeners (explicit
// proxy, transparent, admin/metrics), TLS interception, HTTP/1.1 proxying, the upstream pool
// and the metrics; it reaches the CA, policy, vault and audit log only through gateway/ports.h.
//
// Trust: the sandbox is an untrusted client, the internet an untrusted server. The operator
// (options, ports) is trusted. Fail closed: until set_policy() has been called, nothing flows.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "gateway/config.h"
#include "gateway/h2/limits.h"
#include "gateway/limits.h"
#include "gateway/ports.h"

namespace cordon::gateway {

struct GatewayOptions {
  Limits limits;
  // HTTP/2 toward the sandbox: offered by ALPN on intercepted TLS when on; its limits.
  bool http2 = true;
  h2::H2Limits h2;
  // Static name → address map (an operator statement; the floors still apply to it).
  std::map<std::string, std::string> resolve;
  // "IP[:PORT]": resolve upstream names by querying this DNS server (A and AAAA, UDP with TCP
  // on truncation) instead of the system resolver. Empty = system resolver.
  std::string dns_server;
  // Extra trust anchors for upstream certificates, besides the system store.
  std::vector<std::string> upstream_ca_files;
  // Use the system trust store for upstreams (tests turn it off to stay hermetic).
  bool system_trust_store = true;
  // If the audit sink fails, deny requests (design.md §3). false = let them through.
  bool deny_on_audit_failure = true;
  // io threads (one io_context each); 0 = hardware concurrency.
  unsigned threads = 0;
};

struct GatewayPorts {
  std::shared_ptr<CertProvider> certs;
  std::shared_ptr<SandboxDirectory> sandboxes;
  std::shared_ptr<CredentialSource> credentials;
  std::shared_ptr<AuditSink> audit;
};

class Gateway {
 public:
  static Result<std::unique_ptr<Gateway>> create(GatewayOptions options, GatewayPorts ports);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Atomically replaces the whole configuration (a rules file load or reload): requests
  // already parsed keep the snapshot they took, every later request (also on open
  // connections) and every later DNS query of a responder reading config_source() uses the
  // new one.
  void set_config(GatewayConfig config);
  // The same, replacing only the policy (the rest of the snapshot stays as it was).
  void set_policy(std::shared_ptr<const PolicyView> policy);
  // The same, replacing the policy and the reloadable options.
  void set_config(std::shared_ptr<const PolicyView> policy, RuntimeOptions runtime);

  // The source the gateway reads its configuration from. Hand it to the DNS responder
  // (DnsResponder::create) so that both answer from one snapshot.
  std::shared_ptr<ConfigSource> config_source() const;

  // Ends the open client connections of sandbox `sandbox_id` (intercepted HTTP/1.1 and HTTP/2,
  // passthrough and CONNECT tunnels, WebSocket tunnels, explicit-proxy and transparent alike)
  // whose destination host (SNI, CONNECT host, or the host of the last request on a plain HTTP
  // connection) the sandbox's overlay or the current policy no longer permits. Call it after
  // narrowing the overlay: new requests meet the new overlay anyway, but an open tunnel or a
  // long response would otherwise go on. Each connection is closed on its own io thread (its
  // client and upstream sockets; an HTTP/2 connection with all its streams), is audited once
  // (event `connection_cut`, decision deny, reason `network_overlay_narrowed` or
  // `policy_refuses`) and counted in cordon_connections_cut_total. Connections whose host is
  // not known yet (still in their handshake) are left to the check they are about to make.
  // Thread-safe, does not wait for the closes; returns how many connections it ended.
  std::size_t end_refused_connections(std::string_view sandbox_id);

  // Listeners. "ADDR:PORT" (port 0 = any); the bound port is returned. Call before start().
  Result<uint16_t> listen_proxy(const std::string& addr);
  Result<uint16_t> listen_transparent(const std::string& addr);
  // The transparent listeners' sockets as (fd, is IPv6), for the steering's listener map.
  std::vector<std::pair<int, bool>> transparent_listener_fds() const;
  // "ADDR:PORT" on loopback, or "unix:PATH" (created 0600). Returns the bound address.
  Result<std::string> listen_admin(const std::string& addr);

  void start();
  // Graceful: stops accepting, waits up to `grace_ms` for open connections, then cancels.
  void stop(unsigned grace_ms = 2000);

  // Prometheus text exposition of the metrics.
  std::string metrics_text() const;
  // Records a reload outcome (audited by the caller's sink as well).
  void note_reload(bool ok);

  struct Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cordon::gateway
