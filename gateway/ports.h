// The narrow interfaces ("ports") through which the gateway data path reaches the rest of
// cordon: the CA (leaf certificates), the policy (decisions, path canonicalization, floors),
// the vault (secret values, proxy tokens, sandbox identities) and the audit log. The data path
// is built and tested against in-memory fakes of these; gateway/adapters/ binds them to the
// real libraries.
//
// Trust: implementations are trusted (they are cordon's own components). Everything passed
// *into* them from the gateway comes from an untrusted sandbox and has only been parsed, not
// believed. Implementations must be thread-safe: the gateway calls them from every io thread.
#pragma once

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace cordon::gateway {

// ---- CA -------------------------------------------------------------------------------------

struct LeafCert {
  std::shared_ptr<X509> cert;                // leaf for the SNI
  std::shared_ptr<EVP_PKEY> key;             // the (shared) leaf key
  std::vector<std::shared_ptr<X509>> chain;  // intermediates, may be empty
  bool minted = false;                       // signed for this call, not served from a cache
};

// Error code of CertProvider::leaf_for when the mint budget (mints per second) refused it.
inline constexpr int kCertMintRateLimited = 429;

class CertProvider {
 public:
  virtual ~CertProvider() = default;
  // A leaf certificate for `sni` (already validated as a host name by the caller). May mint;
  // must be fast when cached. The provider owns the only leaf cache (bounded, renewed before
  // expiry) and the mint budget: over it, it fails with code kCertMintRateLimited.
  virtual Result<LeafCert> leaf_for(std::string_view sni) = 0;
};

// ---- Policy ---------------------------------------------------------------------------------

enum class TlsMode { kIntercept, kPassthrough };
enum class TokenMode { kOff, kOptional, kRequired };

struct CredentialSpec {
  std::string name;         // credential name (audited)
  std::string secret_name;  // vault secret name
  std::string header;       // header the credential sets, e.g. "Authorization"
  std::string format;       // e.g. "Bearer {secret}"
  TokenMode token = TokenMode::kOff;
};

struct DestinationInfo {
  std::string id;
  TlsMode tls = TlsMode::kIntercept;
  bool plaintext_credentials = false;  // the rule opts in to credentials over plain HTTP
  // The header names of every credential reachable through this destination's routes: they
  // are stripped from client requests whatever the route.
  std::vector<std::string> credential_headers;
  // Overwrite the secret values injected on the connection where a response body echoes them
  // (gateway/stages/body_relay.h); the rules' `scrub_response_body`.
  bool scrub_response_body = true;
};

struct RequestFacts {
  std::string_view profile;
  std::string_view host;  // lower-case, no port
  uint16_t port = 0;
  std::string_view method;
  std::string_view path;  // canonical path (with canonical query, if any)
  bool tls = true;
};

struct Decision {
  bool allow = false;
  bool report_only = false;  // mode: report: decided deny, but let through (audited)
  std::string rule;          // rule id that decided (route id, or "default-deny", "floors")
  std::string destination;   // destination id, empty if none matched
  std::string route;         // route id, empty if none matched
  std::optional<CredentialSpec> credential;
  std::string reason;  // short machine word: "no_destination", "no_route", "route_deny", ...
};

class PolicyView {
 public:
  virtual ~PolicyView() = default;
  // The destination that (profile, host, port) falls into, if any.
  virtual std::optional<DestinationInfo> destination(std::string_view profile,
                                                     std::string_view host,
                                                     uint16_t port) const = 0;
  virtual Decision decide(const RequestFacts& facts) const = 0;
  // Canonical form of a request target's path+query; error = ambiguous (answered with 400).
  virtual Result<std::string> canonicalize_path(std::string_view target) const = 0;
  // The floors: true if the gateway must never connect to this address (IPv4 or IPv6 text).
  virtual bool address_denied(std::string_view ip) const = 0;
};

// ---- Vault ----------------------------------------------------------------------------------
//
// Every vault port has blocking lookups and non-blocking twins (try_*). The io threads only
// call the twins: an answer the implementation holds in memory comes back at once; one that
// needs its store (a cache miss, a due change check) comes back as "would block", and the
// gateway then calls the blocking lookup on its blocking pool (gateway/detail/blocking_pool.h)
// and carries on with that answer. The defaults of the twins call the blocking lookups in
// place: right for implementations that never block (in-memory fakes); one that may block
// (the vault adapter) overrides them.

// The answer of a non-blocking lookup: a value, or "would block" (ask the blocking lookup,
// off the io thread).
template <class T>
class NonBlocking {
 public:
  static NonBlocking would_block() { return NonBlocking(); }
  // Implicit, so that an answer is returned as it is.
  NonBlocking(T value) : value_(std::move(value)) {}
  bool ready() const { return value_.has_value(); }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  NonBlocking() = default;
  std::optional<T> value_;
};

// A sandbox's own narrowing of its profile (the E2B `network` settings): it can only refuse
// what the profile would allow. Its holder may change what it permits at any time (a live
// update), so the gateway asks it afresh for every request. Must be thread-safe and fast.
class SandboxOverlay {
 public:
  virtual ~SandboxOverlay() = default;
  virtual bool permits(std::string_view host) const = 0;
};

struct SandboxInfo {
  std::string id;
  std::string profile;
  std::shared_ptr<const SandboxOverlay> overlay;  // nullptr: the profile as it is
};

class SandboxDirectory {
 public:
  virtual ~SandboxDirectory() = default;
  // Explicit proxy: Proxy-Authorization Basic id:secret. nullopt = unknown id or bad secret.
  virtual std::optional<SandboxInfo> by_proxy_credentials(std::string_view id,
                                                          std::string_view secret) const = 0;
  // Transparent mode: by source address (textual IPv4/IPv6).
  virtual std::optional<SandboxInfo> by_address(std::string_view ip) const = 0;

  // Non-blocking twins (see above).
  virtual NonBlocking<std::optional<SandboxInfo>> try_by_proxy_credentials(
      std::string_view id, std::string_view secret) const {
    return by_proxy_credentials(id, secret);
  }
  virtual NonBlocking<std::optional<SandboxInfo>> try_by_address(std::string_view ip) const {
    return by_address(ip);
  }
};

struct TokenInfo {
  std::string id;           // token id (audited; never the token value); may be empty if refused
  std::string credential;   // bound credential name
  bool sandbox_ok = false;  // usable by the presenting sandbox (unbound, or bound to it)
  bool active = false;      // unrevoked and unexpired, right now
};

class CredentialSource {
 public:
  virtual ~CredentialSource() = default;
  virtual Result<std::string> secret_value(std::string_view secret_name) const = 0;
  // Looks a token up for the presenting sandbox; nullopt = unknown or malformed token. Which
  // strings are tokens is decided by their shape (find_proxy_tokens in
  // gateway/stages/credential_injector.h), so that one never leaves whatever the vault says.
  virtual std::optional<TokenInfo> lookup_token(std::string_view token,
                                                std::string_view sandbox_id) const = 0;

  // Non-blocking twins (see above).
  virtual NonBlocking<Result<std::string>> try_secret_value(std::string_view secret_name) const {
    return secret_value(secret_name);
  }
  virtual NonBlocking<std::optional<TokenInfo>> try_lookup_token(
      std::string_view token, std::string_view sandbox_id) const {
    return lookup_token(token, sandbox_id);
  }
};

// ---- Audit ----------------------------------------------------------------------------------

// What one audit line is about. to_string gives the words the log has always had (the audit
// adapter writes them as the event; a connection line becomes connection_passthrough or
// connection_refused there), so a rename here never changes a line.
enum class AuditKind {
  kRequest,        // one HTTP request or h2 stream, decided by the request pipeline
  kConnection,     // a connection decided as a whole: a passthrough splice or a refusal
  kConnectionCut,  // an open connection ended because a reload no longer permits it
  kDns,            // a refused DNS query, or a summary of the ones counted instead of written
};

enum class AuditDecision { kAllow, kDeny, kError };

constexpr std::string_view to_string(AuditKind k) {
  switch (k) {
    case AuditKind::kRequest:
      return "request";
    case AuditKind::kConnection:
      return "connection";
    case AuditKind::kConnectionCut:
      return "connection_cut";
    case AuditKind::kDns:
      return "dns";
  }
  return "unknown";
}

constexpr std::string_view to_string(AuditDecision d) {
  switch (d) {
    case AuditDecision::kAllow:
      return "allow";
    case AuditDecision::kDeny:
      return "deny";
    case AuditDecision::kError:
      return "error";
  }
  return "unknown";
}

struct AuditRecord {
  AuditKind kind = AuditKind::kRequest;
  std::string request_id;
  std::string sandbox;
  std::string src;  // ip:port
  std::string dst;  // original destination ip:port (transparent) or CONNECT authority
  std::string sni;
  std::string host;
  std::string method;
  std::string path;  // canonical path (never a raw, ambiguous one)
  std::string destination;
  std::string route;
  std::string rule;
  // Error until decided: a record written before anything was decided is not an allow.
  AuditDecision decision = AuditDecision::kError;
  std::string reason;
  int status = 0;
  uint64_t bytes_up = 0;    // request body bytes forwarded
  uint64_t bytes_down = 0;  // response body bytes returned
  uint64_t duration_us = 0;
  std::string credential;  // credential name, never a value
  std::string token_id;    // token id, never a value
  // Events counted rather than written one by one (a summary line), by reason; written as
  // integer fields "count.<reason>".
  std::vector<std::pair<std::string, uint64_t>> counts;
};

class AuditSink {
 public:
  virtual ~AuditSink() = default;
  // Must not block for long (the real writer is asynchronous). An error means the line may be
  // lost: the gateway then denies requests (fail closed) until an append succeeds again.
  virtual Status append(const AuditRecord& record) = 0;
  // Whether an append made now would be written. Asked before each request is forwarded, so
  // that the request that meets a failing log is itself denied (design.md §3). Cheap, no I/O.
  // A sink that cannot tell says healthy; its append() failures still fail closed.
  virtual Status health() const { return {}; }
  // Bytes the log takes on disk now (for /metrics); -1 if the sink cannot tell. Cheap.
  virtual int64_t disk_bytes() const { return -1; }
};

}  // namespace cordon::gateway
