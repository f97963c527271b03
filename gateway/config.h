// The configuration the gateway and its DNS responder run with: one immutable snapshot (the
// policy view, the DNS view of the same rules file, the reloadable options), published as a
// whole by a ConfigSource that both read. A rules file reload builds one GatewayConfig and
// publishes it once, so there is no moment at which the DNS responder answers from one
// generation of the rules while the gateway decides with another, and no request or query
// sees half of a reload: each takes the snapshot once (per connection, request or query) and
// keeps what it took.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

#include "gateway/h2/limits.h"
#include "gateway/limits.h"
#include "gateway/ports.h"

namespace cordon::gateway {

// What a reload of the rules file may change in a running gateway (its `gateway:` section,
// policy/gateway_settings.h), swapped together with the policy in one GatewayConfig. Of
// `limits`, HTTP/1.1 connections opened after the swap use the head limits, timeouts, buffer
// size and ClientHello peek; every request after it the audit rule and the per-sandbox
// connection cap. The pool sizes, the TLS session cache size and the mint rate are sized once
// at create() and stay as they were (GatewayOptions). `h2` is taken by the HTTP/2 code from
// GatewayOptions today (see gateway/h2/connection.cc).
struct RuntimeOptions {
  Limits limits;
  h2::H2Limits h2;
  bool deny_on_audit_failure = true;
};

// The part of the policy the DNS responder needs.
class DnsPolicy {
 public:
  virtual ~DnsPolicy() = default;
  // True if `host` (lower-case, no trailing dot) is in some destination of the profile.
  virtual bool host_reachable(std::string_view profile, std::string_view host) const = 0;
  // `dns: {unlisted: refused}`: answer REFUSED instead of NXDOMAIN for unlisted names.
  virtual bool unlisted_refused() const = 0;
};

// One configuration, never changed once published.
struct GatewayConfig {
  std::shared_ptr<const PolicyView> policy;     // null: nothing flows (fail closed)
  std::shared_ptr<const DnsPolicy> dns_policy;  // null: every DNS query is REFUSED
  RuntimeOptions runtime;
  // The rules file's generation (PolicyStore), for audit and tests; 0 = not from a store.
  std::uint64_t generation = 0;
};

// Where the current GatewayConfig is read from. Readers never block each other or a writer
// for longer than a reference-count update (an atomic shared_ptr); writers are serialized so
// that update()'s read-modify-write never loses another writer's change. Thread-safe.
class ConfigSource {
 public:
  explicit ConfigSource(GatewayConfig initial = {})
      : current_(std::make_shared<const GatewayConfig>(std::move(initial))) {}
  ConfigSource(const ConfigSource&) = delete;
  ConfigSource& operator=(const ConfigSource&) = delete;

  // The snapshot in force; never null. Take it once per connection, request or query.
  std::shared_ptr<const GatewayConfig> current() const {
    return current_.load(std::memory_order_acquire);
  }

  // Replaces the whole configuration: every later current() returns it.
  void publish(GatewayConfig next) {
    auto p = std::make_shared<const GatewayConfig>(std::move(next));
    std::lock_guard lk(write_mu_);
    current_.store(std::move(p), std::memory_order_release);
  }

  // Publishes a copy of the current configuration changed by `change(GatewayConfig&)`: for
  // callers that own one part only (a test setting the policy alone).
  template <class Change>
  void update(Change&& change) {
    std::lock_guard lk(write_mu_);
    GatewayConfig next = *current_.load(std::memory_order_acquire);
    change(next);
    current_.store(std::make_shared<const GatewayConfig>(std::move(next)),
                   std::memory_order_release);
  }

 private:
  std::atomic<std::shared_ptr<const GatewayConfig>> current_;
  std::mutex write_mu_;
};

}  // namespace cordon::gateway
