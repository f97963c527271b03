// The policy: a rules file (design.md §4, rules.example.yaml) parsed, linted and compiled
// into an immutable matcher that answers, for a sandbox's profile, which destinations it may
// reach and what each request may do.
//
// Owns: the YAML grammar, lint, the compiled host/route/CIDR matchers, decisions.
// Trusts: the rules file only after lint (its author is the operator, but typos are
// expected); every request field passed to the query functions comes from the sandbox and is
// untrusted (it may be any bytes; bad input yields a deny, never a crash or an allow).
//
// Lifetime and threads: a Policy is immutable after compile_policy returns; all const member
// functions are thread-safe. string_views and pointers in results (Decision, Connection)
// point into the Policy and stay valid as long as the shared_ptr<const Policy> is held.
// The query functions never throw and do not allocate.
//
// Matching (stable promises):
//  * Hosts are compared case-insensitively; one trailing dot is ignored. "a.example.com" is
//    exact, "*.example.com" matches exactly one more label, "**.example.com" one or more;
//    the apex "example.com" is never implied by a wildcard. Non-ASCII names are refused
//    (IDN must be written as punycode "xn--...").
//  * When several destinations of a profile match a host/port, the most specific wins: an
//    exact host, then the wildcard with the longest suffix, "*." before "**." at the same
//    suffix. Lint refuses two destinations of one profile that list the same host pattern
//    with overlapping ports, so the choice is never ambiguous.
//  * Routes are tried in file order; the first whose methods and path match decides; no
//    match is a deny. Paths are matched against the output of canonicalize_target.
//  * Plaintext (non-TLS) requests are denied unless the destination says
//    `plaintext: allow` (no credential may be injected) or `plaintext: allow_with_credentials`
//    (design.md §3: "over TLS unless the rule opts in").
//  * mode: report — every decision is computed as usual and returned in `verdict`, but
//    `allowed` is true so the gateway lets the request through (without a credential unless
//    the verdict allowed it). Floors (address_denied) are never relaxed by report mode.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "policy/gateway_settings.h"

namespace cordon::policy {

enum class Mode { kEnforce, kReport };
enum class TlsMode { kIntercept, kPassthrough };
enum class Plaintext { kDeny, kAllow, kAllowWithCredentials };
enum class TokenMode { kOff, kOptional, kRequired };
enum class DnsUnlisted { kNxdomain, kRefused };

std::string_view to_string(Mode m);
std::string_view to_string(TlsMode t);
std::string_view to_string(Plaintext p);
std::string_view to_string(TokenMode t);
std::string_view to_string(DnsUnlisted d);

// A credential of the rules file: where the secret comes from and how it is put on a request.
struct Credential {
  std::string name;    // the credential's name in the rules file
  std::string secret;  // vault secret name (never the value)
  std::string header;  // header to set, as written (e.g. "Authorization")
  std::string format;  // contains "{secret}" exactly once, e.g. "Bearer {secret}"
  TokenMode token = TokenMode::kOff;
};

// Connection-level answer: the destination chosen for (profile, host, port).
struct Connection {
  std::string_view destination;  // destination id
  TlsMode tls = TlsMode::kIntercept;
  Plaintext plaintext = Plaintext::kDeny;
  // The header of every credential that some route of this destination injects (each name
  // once, as written): the gateway strips them all from client requests whichever route
  // matches (design.md §2 step 6). Views into the policy.
  std::vector<std::string_view> credential_headers;
  // Whether known secret values are overwritten in response bodies (`scrub_response_body`,
  // default true; it only does something when a credential was injected on the connection).
  bool scrub_response_body = true;
};

// A request as the gateway sees it after canonicalization.
struct Request {
  std::string_view profile;
  std::string_view host;  // the verified SNI / Host, without port
  std::uint16_t port = 443;
  std::string_view method;  // as sent, case-sensitive ("GET")
  std::string_view path;    // CanonicalTarget::path (without query)
  bool tls = true;          // false for plain HTTP
};

// Why a decision came out as it did. Stable: the names (reason_name) go into audit lines.
enum class Reason : std::uint8_t {
  kRouteAllowed,         // a route with action allow matched
  kRouteDenied,          // a route with action deny matched
  kNoRouteMatched,       // the destination matched but none of its routes
  kUnknownProfile,       // the profile is not in the rules file
  kInvalidHost,          // the host is not a valid ASCII host name
  kHostNotAllowed,       // no destination of the profile lists the host
  kPortNotAllowed,       // a destination lists the host, but not this port
  kPlaintextNotAllowed,  // request over plain HTTP to a TLS-only destination
  kCredentialNeedsTls,   // the route injects a credential; plain HTTP without the opt-in
  kPassthrough,          // the destination is passthrough: requests are not inspected
  kPathNotCanonical,     // the path given is not a canonical path (see path.h)
  kOverlayDenied,        // the sandbox's overlay (allowOut/denyOut) excludes the host
};
std::string_view reason_name(Reason r);

struct Decision {
  bool allowed = false;  // what to do: forward (true) or refuse (false)
  bool verdict = false;  // the policy's own answer; differs from allowed only in report mode
  Mode mode = Mode::kEnforce;
  Reason reason = Reason::kHostNotAllowed;
  std::string_view destination;  // empty when no destination matched
  std::string_view route;        // empty when no route matched
  // The credential to inject, or nullptr. Set only when the verdict is allow.
  const Credential* credential = nullptr;
  TlsMode tls = TlsMode::kIntercept;
};

// An IP address as 16 bytes (IPv4 in the first 4, family says which).
struct IpAddress {
  bool v6 = false;
  std::array<std::uint8_t, 16> bytes{};
  static std::optional<IpAddress> parse(std::string_view text);  // dotted quad or RFC 4291
  static IpAddress v4(std::uint32_t host_order);
};

// A lint finding, with a 1-based position in the rules file.
struct Diagnostic {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;
  std::string to_string() const;  // "file:line:column: message"
};

class Policy;

namespace detail {
struct CompiledPolicy;
struct OverlayData;
}  // namespace detail

// A per-sandbox overlay (design.md §8, E2B `network.allowOut/denyOut`) that can only narrow
// the sandbox's profile: on top of everything the profile requires, the host must match one
// of allow_out (when allow_out is non-empty) and none of deny_out. Patterns use the rules
// file's host syntax ("api.x.com", "*.x.com", "**.x.com"; ASCII/punycode only). IP and CIDR
// entries are not host patterns and are refused here: the caller applies them to resolved
// addresses, where they too may only add denials. An overlay denial holds in report mode as
// well (the sandbox's creator asked for it; report mode only relaxes the rules file).
class Overlay {
 public:
  static Result<std::shared_ptr<const Overlay>> compile(const std::vector<std::string>& allow_out,
                                                        const std::vector<std::string>& deny_out);
  explicit Overlay(std::unique_ptr<detail::OverlayData> data);
  ~Overlay();
  Overlay(const Overlay&) = delete;
  Overlay& operator=(const Overlay&) = delete;

  // Whether the overlay lets the host through (untrusted input; invalid names are not).
  bool permits(std::string_view host) const;

 private:
  friend class Policy;
  bool permits_normalized(std::string_view host) const;
  std::unique_ptr<detail::OverlayData> data_;
};

// Result of compiling a rules file: a policy when there is no error, else every error found
// (up to kMaxLintErrors), in file order.
struct CompileResult {
  std::shared_ptr<const Policy> policy;
  std::vector<Diagnostic> errors;
  bool ok() const { return policy != nullptr; }
  std::string errors_text() const;  // one Diagnostic::to_string() per line
};

// Parses, lints and compiles. `file_name` is only used in diagnostics.
CompileResult compile_policy(std::string_view yaml_text, std::string_view file_name);
// Reads the file (refusing files over kMaxRulesFileBytes) and compiles it. A read error is
// returned as a Diagnostic at line 0.
CompileResult load_policy_file(const std::string& path);

class Policy {
 public:
  explicit Policy(std::unique_ptr<detail::CompiledPolicy> impl);
  ~Policy();
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  Mode mode() const;
  DnsUnlisted dns_unlisted() const;
  // The `gateway:` section: limits and options of the gateway (gateway_settings.h).
  const GatewaySettings& gateway_settings() const;
  // Set by PolicyStore when the policy is installed; 0 for a policy not from a store.
  std::uint64_t generation() const { return generation_; }
  std::size_t destination_count() const;
  std::vector<std::string> profile_names() const;  // in file order (allocates; not hot)
  bool has_profile(std::string_view profile) const;

  // Connection level: the destination for (profile, host, port), or nullopt (refuse).
  // An overlay, when given, narrows every answer (see Overlay).
  std::optional<Connection> match_connection(std::string_view profile, std::string_view host,
                                             std::uint16_t port,
                                             const Overlay* overlay = nullptr) const;

  // Request level: the full decision. Never allocates; under a microsecond (bench/policy).
  Decision decide(const Request& request, const Overlay* overlay = nullptr) const;

  // DNS: whether `host` matches any destination of the profile (any port). For unlisted
  // names the resolver answers as dns_unlisted() says.
  bool host_reachable(std::string_view profile, std::string_view host,
                      const Overlay* overlay = nullptr) const;

  // Floors: true when the address is inside a deny_cidrs entry, directly or through an IPv6
  // embedding of an IPv4 address (IPv4-mapped ::ffff:0:0/96, IPv4-translated
  // ::ffff:0:0:0/96, IPv4-compatible ::/96, 6to4 2002::/16, NAT64 64:ff9b::/96 and
  // 64:ff9b:1::/48, Teredo 2001::/32 server and client). Text that does not parse is denied.
  // When the rules file has no `floors`, the defaults of design.md §4 apply (loopback,
  // link-local, RFC 1918, CGNAT, ::1, fc00::/7, fe80::/10, plus 0.0.0.0/8 and ::/128).
  bool address_denied(const IpAddress& address) const;
  bool address_denied(std::string_view address_text) const;

 private:
  friend class PolicyStore;
  std::unique_ptr<detail::CompiledPolicy> impl_;
  std::uint64_t generation_ = 0;
};

}  // namespace cordon::policy
