#include "gateway/testing/fakes.h"

#include <algorithm>

namespace cordon::gateway::testing {

Result<LeafCert> FakeCerts::leaf_for(std::string_view sni) {
  std::lock_guard lk(mu_);
  if (auto it = cache_.find(sni); it != cache_.end()) {
    LeafCert hit = it->second;
    hit.minted = false;
    return hit;
  }
  ++mints_;
  LeafCert leaf = ca_.issue({std::string(sni)}, key_);
  leaf.minted = true;
  if (cache_.size() < 1024) cache_.emplace(std::string(sni), leaf);
  return leaf;
}

const FakeDestination* FakePolicy::find(std::string_view profile, std::string_view host,
                                        uint16_t port) const {
  auto p = profiles.find(std::string(profile));
  if (p == profiles.end()) return nullptr;
  for (const auto& d : destinations) {
    if (std::find(p->second.begin(), p->second.end(), d.id) == p->second.end()) continue;
    bool host_ok = std::find(d.hosts.begin(), d.hosts.end(), host) != d.hosts.end();
    bool port_ok = std::find(d.ports.begin(), d.ports.end(), port) != d.ports.end();
    if (host_ok && port_ok) return &d;
  }
  return nullptr;
}

std::optional<DestinationInfo> FakePolicy::destination(std::string_view profile,
                                                       std::string_view host, uint16_t port) const {
  const auto* d = find(profile, host, port);
  if (!d) return std::nullopt;
  DestinationInfo info;
  info.id = d->id;
  info.tls = d->tls;
  info.plaintext_credentials = d->plaintext_credentials;
  info.scrub_response_body = d->scrub_response_body;
  for (const auto& r : d->routes) {
    if (r.credential) info.credential_headers.push_back(r.credential->header);
  }
  return info;
}

Decision FakePolicy::decide(const RequestFacts& f) const {
  Decision d;
  d.report_only = report_mode;
  const auto* dest = find(f.profile, f.host, f.port);
  if (!dest) {
    d.rule = "default-deny";
    d.reason = "no_destination";
    return d;
  }
  d.destination = dest->id;
  for (const auto& r : dest->routes) {
    bool m = r.methods.empty() ||
             std::find(r.methods.begin(), r.methods.end(), f.method) != r.methods.end();
    bool p = r.path_prefix.empty() || f.path.substr(0, r.path_prefix.size()) == r.path_prefix;
    if (!m || !p) continue;
    d.route = r.id;
    d.rule = r.id;
    d.allow = r.allow;
    d.reason = r.allow ? "route_allow" : "route_deny";
    d.credential = r.credential;
    return d;
  }
  d.rule = "default-deny";
  d.reason = "no_route";
  return d;
}

Result<std::string> FakePolicy::canonicalize_path(std::string_view target) const {
  static constexpr std::string_view kAmbiguous[] = {"..", "%2e", "%2E", "%2f", "%2F", "%5c", "%5C",
                                                    "\\", "%00", "//",  "%23", "%3f", "%3F"};
  for (auto a : kAmbiguous) {
    if (target.find(a) != std::string_view::npos) return fail("ambiguous path");
  }
  if (target.empty() || target.front() != '/') return fail("not a path");
  return std::string(target);
}

bool FakePolicy::address_denied(std::string_view ip) const {
  for (const auto& p : denied_prefixes) {
    if (ip.substr(0, p.size()) == p) return true;
  }
  return false;
}

void FakeSandboxes::add(const std::string& id, const std::string& secret,
                        const std::string& profile, const std::string& address) {
  std::lock_guard lk(mu_);
  by_id_[id] = Entry{secret, SandboxInfo{id, profile}, address};
}

std::optional<SandboxInfo> FakeSandboxes::by_proxy_credentials(std::string_view id,
                                                               std::string_view secret) const {
  std::lock_guard lk(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.secret != secret) return std::nullopt;
  return it->second.info;
}

std::optional<SandboxInfo> FakeSandboxes::by_address(std::string_view ip) const {
  std::lock_guard lk(mu_);
  for (const auto& [id, e] : by_id_) {
    if (!e.address.empty() && e.address == ip) return e.info;
  }
  return std::nullopt;
}

void FakeCredentials::put_secret(const std::string& name, const std::string& value) {
  std::lock_guard lk(mu_);
  secrets_[name] = value;
}

void FakeCredentials::put_token(const std::string& token, const std::string& id,
                                const std::string& sandbox, const std::string& credential) {
  std::lock_guard lk(mu_);
  tokens_[token] = Token{id, sandbox, credential, true};
}

void FakeCredentials::revoke(const std::string& token) {
  std::lock_guard lk(mu_);
  if (auto it = tokens_.find(token); it != tokens_.end()) it->second.active = false;
}

Result<std::string> FakeCredentials::secret_value(std::string_view name) const {
  std::lock_guard lk(mu_);
  auto it = secrets_.find(name);
  if (it == secrets_.end()) return fail("no secret " + std::string(name));
  return it->second;
}

std::string FakeCredentials::make_token(const std::string& id, char fill) {
  return "cdn_" + id + "_" + std::string(43, fill);
}

std::optional<TokenInfo> FakeCredentials::lookup_token(std::string_view token,
                                                       std::string_view sandbox_id) const {
  std::lock_guard lk(mu_);
  auto it = tokens_.find(token);
  if (it == tokens_.end()) return std::nullopt;
  TokenInfo info;
  info.id = it->second.id;
  info.credential = it->second.credential;
  info.sandbox_ok = it->second.sandbox.empty() || it->second.sandbox == sandbox_id;
  info.active = it->second.active;
  return info;
}

Status MemoryAudit::append(const AuditRecord& record) {
  std::lock_guard lk(mu_);
  if (failing_) return fail("audit: disk full (simulated)");
  if (fail_next_ > 0) {
    --fail_next_;
    return fail("audit: disk full (simulated, one append)");
  }
  records_.push_back(record);
  return {};
}

Status MemoryAudit::health() const {
  std::lock_guard lk(mu_);
  if (failing_) return fail("audit: disk full (simulated)");
  return {};
}

std::vector<AuditRecord> MemoryAudit::records() const {
  std::lock_guard lk(mu_);
  return records_;
}

void MemoryAudit::clear() {
  std::lock_guard lk(mu_);
  records_.clear();
}

}  // namespace cordon::gateway::testing
