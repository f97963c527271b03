// Query side of Policy: decisions, connection matching, DNS reachability and floors, all on
// the compiled model (detail/model.h). Nothing here allocates or throws.
#include "policy/policy.h"

#include "policy/detail/model.h"
#include "policy/limits.h"

namespace cordon::policy {

using detail::StringIndex;

std::string_view to_string(Mode m) {
  return m == Mode::kEnforce ? "enforce" : "report";
}
std::string_view to_string(TlsMode t) {
  return t == TlsMode::kIntercept ? "intercept" : "passthrough";
}
std::string_view to_string(Plaintext p) {
  switch (p) {
    case Plaintext::kDeny:
      return "deny";
    case Plaintext::kAllow:
      return "allow";
    case Plaintext::kAllowWithCredentials:
      return "allow_with_credentials";
  }
  return "deny";
}
std::string_view to_string(TokenMode t) {
  switch (t) {
    case TokenMode::kOff:
      return "off";
    case TokenMode::kOptional:
      return "optional";
    case TokenMode::kRequired:
      return "required";
  }
  return "off";
}
std::string_view to_string(DnsUnlisted d) {
  return d == DnsUnlisted::kNxdomain ? "nxdomain" : "refused";
}

std::string_view reason_name(Reason r) {
  switch (r) {
    case Reason::kRouteAllowed:
      return "route_allowed";
    case Reason::kRouteDenied:
      return "route_denied";
    case Reason::kNoRouteMatched:
      return "no_route_matched";
    case Reason::kUnknownProfile:
      return "unknown_profile";
    case Reason::kInvalidHost:
      return "invalid_host";
    case Reason::kHostNotAllowed:
      return "host_not_allowed";
    case Reason::kPortNotAllowed:
      return "port_not_allowed";
    case Reason::kPlaintextNotAllowed:
      return "plaintext_not_allowed";
    case Reason::kCredentialNeedsTls:
      return "credential_needs_tls";
    case Reason::kPassthrough:
      return "passthrough";
    case Reason::kPathNotCanonical:
      return "path_not_canonical";
    case Reason::kOverlayDenied:
      return "overlay_denied";
  }
  return "unknown";
}

std::string Diagnostic::to_string() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

std::string CompileResult::errors_text() const {
  std::string out;
  for (const auto& d : errors) out += d.to_string() + "\n";
  return out;
}

namespace detail {

std::uint16_t method_bit(std::string_view m) {
  switch (m.size()) {
    case 3:
      if (m == "GET") return kGet;
      if (m == "PUT") return kPut;
      break;
    case 4:
      if (m == "HEAD") return kHead;
      if (m == "POST") return kPost;
      break;
    case 5:
      if (m == "PATCH") return kPatch;
      if (m == "TRACE") return kTrace;
      break;
    case 6:
      if (m == "DELETE") return kDelete;
      break;
    case 7:
      if (m == "OPTIONS") return kOptions;
      if (m == "CONNECT") return kConnect;
      break;
    default:
      break;
  }
  return 0;
}

namespace {

// '*' matches any run of bytes within one segment (the caller passes single segments).
bool segment_match(std::string_view pat, std::string_view s) {
  std::size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < pat.size() && pat[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (pi < pat.size() && pat[pi] == s[si]) {
      ++pi;
      ++si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < pat.size() && pat[pi] == '*') ++pi;
  return pi == pat.size();
}

}  // namespace

bool glob_match(const std::vector<GlobSegment>& glob, std::string_view path) {
  if (path.empty() || path[0] != '/') return false;
  const std::size_t end = path.size() + 1;  // "no more segments"
  auto next = [&](std::size_t p) {
    std::size_t slash = path.find('/', p);
    return slash == std::string_view::npos ? end : slash + 1;
  };
  auto segment = [&](std::size_t p) {
    std::size_t slash = path.find('/', p);
    return path.substr(p, (slash == std::string_view::npos ? path.size() : slash) - p);
  };
  // Classic wildcard matching over segments, "**" being the star: on a mismatch, let the
  // last "**" absorb one more segment and retry.
  std::size_t p = 1, g = 0, star_g = std::string_view::npos, star_p = 0;
  while (p != end) {
    if (g < glob.size() && glob[g].globstar) {
      star_g = g++;
      star_p = p;
      continue;
    }
    if (g < glob.size() && segment_match(glob[g].text, segment(p))) {
      ++g;
      p = next(p);
      continue;
    }
    if (star_g != std::string_view::npos) {
      g = star_g + 1;
      star_p = next(star_p);
      p = star_p;
      continue;
    }
    return false;
  }
  while (g < glob.size() && glob[g].globstar) ++g;
  return g == glob.size();
}

bool compile_glob(std::string_view pattern, std::vector<GlobSegment>* out, std::string* error) {
  out->clear();
  if (pattern.empty() || pattern[0] != '/') {
    *error = "a glob must start with '/'";
    return false;
  }
  std::size_t wildcards = 0;
  std::size_t p = 1;
  while (true) {
    std::size_t slash = pattern.find('/', p);
    std::string_view seg =
        pattern.substr(p, (slash == std::string_view::npos ? pattern.size() : slash) - p);
    GlobSegment s;
    if (seg == "**") {
      s.globstar = true;
      ++wildcards;
    } else {
      if (seg.find("**") != std::string_view::npos) {
        *error = "'**' must be a whole path segment (\"/a/**/b\")";
        return false;
      }
      for (char c : seg) wildcards += c == '*';
      s.text.assign(seg);
    }
    out->push_back(std::move(s));
    if (slash == std::string_view::npos) break;
    p = slash + 1;
  }
  if (wildcards > kMaxGlobWildcards) {
    *error = "a glob may have at most " + std::to_string(kMaxGlobWildcards) + " wildcards";
    return false;
  }
  return true;
}

}  // namespace detail

Policy::Policy(std::unique_ptr<detail::CompiledPolicy> impl) : impl_(std::move(impl)) {}
Policy::~Policy() = default;

Mode Policy::mode() const {
  return impl_->mode;
}
DnsUnlisted Policy::dns_unlisted() const {
  return impl_->dns_unlisted;
}
const GatewaySettings& Policy::gateway_settings() const {
  return impl_->gateway;
}
std::size_t Policy::destination_count() const {
  return impl_->destinations.size();
}

std::vector<std::string> Policy::profile_names() const {
  std::vector<std::string> names;
  for (const auto& p : impl_->profiles) names.push_back(p.name);
  return names;
}

bool Policy::has_profile(std::string_view profile) const {
  return impl_->profile_index.find(profile) != StringIndex::kMissing;
}

namespace {

struct HostLookup {
  std::uint32_t destination = StringIndex::kMissing;
  bool host_seen = false;  // some destination of the profile lists the host (other port)
};

// Finds the destination of `profile` for host:port. port 0 means any port.
HostLookup lookup(const detail::CompiledPolicy& p, std::uint32_t profile, std::string_view host,
                  std::uint16_t port) {
  HostLookup r;
  const auto& member = p.profiles[profile].member;
  const bool use_bits = profile < detail::Profile::kBitProfiles;
  const std::uint64_t bit = use_bits ? std::uint64_t{1} << profile : 0;
  r.destination = p.hosts.match(host, [&](std::uint32_t d) {
    const detail::Destination& dest = p.destinations[d];
    if (use_bits ? (dest.profile_bits & bit) == 0 : !member[d]) return false;
    r.host_seen = true;
    return port == 0 || dest.has_port(port);
  });
  return r;
}

bool path_matches(const detail::Route& r, std::string_view path) {
  switch (r.path_kind) {
    case detail::PathKind::kAny:
      return true;
    case detail::PathKind::kExact:
      return path == r.path;
    case detail::PathKind::kPrefix:
      return path.starts_with(r.path);
    case detail::PathKind::kGlob:
      return detail::glob_match(r.glob, path);
  }
  return false;
}

}  // namespace

std::optional<Connection> Policy::match_connection(std::string_view profile, std::string_view host,
                                                   std::uint16_t port,
                                                   const Overlay* overlay) const {
  const auto& p = *impl_;
  std::uint32_t prof = p.profile_index.find(profile);
  if (prof == StringIndex::kMissing) return std::nullopt;
  char buf[kMaxHostBytes + 1];
  std::size_t n = detail::normalize_host(host, buf);
  if (n == 0 || port == 0) return std::nullopt;
  if (overlay && !overlay->permits_normalized(std::string_view(buf, n))) return std::nullopt;
  HostLookup r = lookup(p, prof, std::string_view(buf, n), port);
  if (r.destination == StringIndex::kMissing) return std::nullopt;
  const auto& d = p.destinations[r.destination];
  Connection c{d.id, d.tls, d.plaintext, {}, d.scrub_response_body};
  for (const auto& route : d.routes) {
    if (route.credential == StringIndex::kMissing) continue;
    std::string_view h = p.credentials[route.credential].header;
    bool seen = false;
    for (auto prev : c.credential_headers) seen = seen || prev == h;
    if (!seen) c.credential_headers.push_back(h);
  }
  return c;
}

bool Policy::host_reachable(std::string_view profile, std::string_view host,
                            const Overlay* overlay) const {
  const auto& p = *impl_;
  std::uint32_t prof = p.profile_index.find(profile);
  if (prof == StringIndex::kMissing) return false;
  char buf[kMaxHostBytes + 1];
  std::size_t n = detail::normalize_host(host, buf);
  if (n == 0) return false;
  if (overlay && !overlay->permits_normalized(std::string_view(buf, n))) return false;
  return lookup(p, prof, std::string_view(buf, n), 0).destination != StringIndex::kMissing;
}

Decision Policy::decide(const Request& req, const Overlay* overlay) const {
  const auto& p = *impl_;
  Decision d;
  d.mode = p.mode;
  auto done = [&](bool verdict, Reason reason) {
    d.verdict = verdict;
    d.reason = reason;
    d.allowed = verdict || p.mode == Mode::kReport;
    if (!verdict) d.credential = nullptr;
    return d;
  };
  std::uint32_t prof = p.profile_index.find(req.profile);
  if (prof == StringIndex::kMissing) return done(false, Reason::kUnknownProfile);
  char buf[kMaxHostBytes + 1];
  std::size_t n = detail::normalize_host(req.host, buf);
  if (n == 0) return done(false, Reason::kInvalidHost);
  if (req.port == 0) return done(false, Reason::kPortNotAllowed);
  if (overlay && !overlay->permits_normalized(std::string_view(buf, n))) {
    Decision o = done(false, Reason::kOverlayDenied);
    o.allowed = false;  // an overlay only narrows, whatever the mode
    return o;
  }
  HostLookup r = lookup(p, prof, std::string_view(buf, n), req.port);
  if (r.destination == StringIndex::kMissing)
    return done(false, r.host_seen ? Reason::kPortNotAllowed : Reason::kHostNotAllowed);

  const detail::Destination& dest = p.destinations[r.destination];
  d.destination = dest.id;
  d.tls = dest.tls;
  if (!req.tls && dest.plaintext == Plaintext::kDeny)
    return done(false, Reason::kPlaintextNotAllowed);
  if (dest.tls == TlsMode::kPassthrough) return done(true, Reason::kPassthrough);
  if (req.path.empty() || req.path[0] != '/') return done(false, Reason::kPathNotCanonical);

  std::uint16_t bit = detail::method_bit(req.method);
  if (bit == 0) bit = detail::kOtherMethod;
  for (const detail::Route& route : dest.routes) {
    if ((route.methods & bit) == 0 || !path_matches(route, req.path)) continue;
    d.route = route.id;
    if (!route.allow) return done(false, Reason::kRouteDenied);
    if (route.credential != StringIndex::kMissing) {
      if (!req.tls && dest.plaintext != Plaintext::kAllowWithCredentials)
        return done(false, Reason::kCredentialNeedsTls);
      d.credential = &p.credentials[route.credential];
    }
    return done(true, Reason::kRouteAllowed);
  }
  return done(false, Reason::kNoRouteMatched);
}

bool Policy::address_denied(const IpAddress& address) const {
  return impl_->floors.denies(address);
}

bool Policy::address_denied(std::string_view address_text) const {
  auto a = IpAddress::parse(address_text);
  if (!a) return true;  // fail closed on anything we cannot read
  return impl_->floors.denies(*a);
}

namespace detail {
struct OverlayData {
  HostMatcher allow;
  HostMatcher deny;
  bool allow_all = true;  // allow_out was empty
};
}  // namespace detail

Overlay::Overlay(std::unique_ptr<detail::OverlayData> data) : data_(std::move(data)) {}
Overlay::~Overlay() = default;

Result<std::shared_ptr<const Overlay>> Overlay::compile(const std::vector<std::string>& allow_out,
                                                        const std::vector<std::string>& deny_out) {
  auto data = std::make_unique<detail::OverlayData>();
  data->allow_all = allow_out.empty();
  for (int pass = 0; pass < 2; ++pass) {
    const auto& list = pass == 0 ? allow_out : deny_out;
    for (const auto& text : list) {
      detail::HostPattern pat;
      std::string err;
      if (!detail::parse_host_pattern(text, &pat, &err))
        return fail(std::string(pass == 0 ? "allowOut" : "denyOut") + " entry '" + text +
                    "': " + err);
      (pass == 0 ? data->allow : data->deny).add(pat, 0);
    }
  }
  data->allow.finish();
  data->deny.finish();
  return std::make_shared<const Overlay>(std::move(data));
}

bool Overlay::permits_normalized(std::string_view host) const {
  auto any = [](std::uint32_t) { return true; };
  if (!data_->allow_all && data_->allow.match(host, any) == StringIndex::kMissing) return false;
  return data_->deny.match(host, any) == StringIndex::kMissing;
}

bool Overlay::permits(std::string_view host) const {
  char buf[kMaxHostBytes + 1];
  std::size_t n = detail::normalize_host(host, buf);
  return n != 0 && permits_normalized(std::string_view(buf, n));
}

}  // namespace cordon::policy
