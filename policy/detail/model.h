// The compiled form of a rules file, shared by the parser (which builds it) and the
// query functions of Policy (which read it). Immutable once built.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "policy/detail/cidr_set.h"
#include "policy/detail/host_matcher.h"
#include "policy/detail/string_index.h"
#include "policy/gateway_settings.h"
#include "policy/policy.h"

namespace cordon::policy::detail {

// Method bits. Requests with a method outside this list only match routes without `methods`.
enum MethodBit : std::uint16_t {
  kGet = 1 << 0,
  kHead = 1 << 1,
  kPost = 1 << 2,
  kPut = 1 << 3,
  kPatch = 1 << 4,
  kDelete = 1 << 5,
  kOptions = 1 << 6,
  kConnect = 1 << 7,
  kTrace = 1 << 8,
  kOtherMethod = 1 << 15,
  kAnyMethod = 0xFFFF,
};
// The bit of an exact, case-sensitive method name; 0 when it is not a known method.
std::uint16_t method_bit(std::string_view method);

enum class PathKind : std::uint8_t { kAny, kExact, kPrefix, kGlob };

// A glob split at '/': each part is a segment pattern ('*' within a segment) or "**"
// (zero or more whole segments).
struct GlobSegment {
  bool globstar = false;
  std::string text;
};

// Matches a canonical path against a glob. No allocation.
bool glob_match(const std::vector<GlobSegment>& glob, std::string_view path);
// Splits a glob pattern; returns false with *error on a pattern lint should refuse.
bool compile_glob(std::string_view pattern, std::vector<GlobSegment>* out, std::string* error);

struct Route {
  // Hot fields first (read for every route tried).
  bool allow = true;
  PathKind path_kind = PathKind::kAny;
  std::uint16_t methods = kAnyMethod;
  std::uint32_t credential = StringIndex::kMissing;  // index into credentials
  std::string path;                                  // exact, prefix or glob text
  std::vector<GlobSegment> glob;
  std::string id;
  int line = 0;
};

struct Destination {
  // Hot fields first: a decision reads these from one cache line.
  std::uint64_t profile_bits = 0;  // bit i: profile i (< 64) lists this destination
  std::uint16_t inline_ports[4] = {0, 0, 0, 0};
  std::uint8_t inline_port_count = 0;
  TlsMode tls = TlsMode::kIntercept;
  Plaintext plaintext = Plaintext::kDeny;
  bool scrub_response_body = true;  // secrets echoed in response bodies are overwritten
  std::vector<Route> routes;
  std::vector<std::uint16_t> ports;  // all ports, as listed
  std::string id;
  std::vector<std::string> hosts;  // as normalized patterns ("*.x.com")

  bool has_port(std::uint16_t port) const {
    for (std::uint8_t i = 0; i < inline_port_count; ++i)
      if (inline_ports[i] == port) return true;
    if (ports.size() <= 4) return false;
    for (std::uint16_t p : ports)
      if (p == port) return true;
    return false;
  }
  void add_port(std::uint16_t port) {
    if (inline_port_count < 4) inline_ports[inline_port_count++] = port;
    ports.push_back(port);
  }
};

struct Profile {
  std::string name;
  std::vector<std::uint32_t> destinations;  // in the order listed
  std::vector<std::uint8_t> member;         // member[destination index] != 0
  // Profiles 0..63 are also recorded in Destination::profile_bits, read on the hot path.
  static constexpr std::uint32_t kBitProfiles = 64;
};

struct CompiledPolicy {
  Mode mode = Mode::kEnforce;
  DnsUnlisted dns_unlisted = DnsUnlisted::kNxdomain;
  std::vector<Credential> credentials;
  std::vector<Destination> destinations;
  std::vector<Profile> profiles;
  StringIndex profile_index;
  HostMatcher hosts;
  CidrSet floors;
  GatewaySettings gateway;  // the `gateway:` section (unset values: the gateway's defaults)
};

}  // namespace cordon::policy::detail
