#include "gateway/adapters/adapters.h"

#include <atomic>

#include "policy/path.h"

namespace cordon::gateway::adapters {

namespace {

class CacheCerts final : public CertProvider {
 public:
  explicit CacheCerts(std::shared_ptr<ca::LeafCertCache> c) : cache_(std::move(c)) {}
  Result<LeafCert> leaf_for(std::string_view sni) override {
    auto leaf = cache_->get(sni);
    if (!leaf) {
      if (leaf.error().code == int(ca::CaError::kRateLimited))
        return fail(leaf.error().message, kCertMintRateLimited);
      return fail(leaf.error());
    }
    LeafCert out;
    out.minted = leaf->minted;
    out.cert = leaf->cert;
    out.key = leaf->key;
    if (leaf->root) out.chain.push_back(leaf->root);
    return out;
  }

 private:
  std::shared_ptr<ca::LeafCertCache> cache_;
};

TlsMode tls_of(policy::TlsMode t) {
  return t == policy::TlsMode::kPassthrough ? TlsMode::kPassthrough : TlsMode::kIntercept;
}

TokenMode token_of(policy::TokenMode t) {
  switch (t) {
    case policy::TokenMode::kOptional:
      return TokenMode::kOptional;
    case policy::TokenMode::kRequired:
      return TokenMode::kRequired;
    default:
      return TokenMode::kOff;
  }
}

class PolicyAdapter final : public PolicyView {
 public:
  explicit PolicyAdapter(std::shared_ptr<const policy::Policy> p) : p_(std::move(p)) {}

  std::optional<DestinationInfo> destination(std::string_view profile, std::string_view host,
                                             uint16_t port) const override {
    auto c = p_->match_connection(profile, host, port);
    if (!c) return std::nullopt;
    DestinationInfo d;
    d.id = std::string(c->destination);
    d.tls = tls_of(c->tls);
    d.plaintext_credentials = c->plaintext == policy::Plaintext::kAllowWithCredentials;
    d.credential_headers.assign(c->credential_headers.begin(), c->credential_headers.end());
    d.scrub_response_body = c->scrub_response_body;
    return d;
  }

  Decision decide(const RequestFacts& f) const override {
    policy::Request r;
    r.profile = f.profile;
    r.host = f.host;
    r.port = f.port;
    r.method = f.method;
    // The policy matches the path alone; the query was canonicalized with it.
    r.path = f.path.substr(0, f.path.find('?'));
    r.tls = f.tls;
    policy::Decision pd = p_->decide(r);
    Decision d;
    d.allow = pd.allowed;
    d.report_only = pd.allowed && !pd.verdict;
    d.destination = std::string(pd.destination);
    d.route = std::string(pd.route);
    d.reason = std::string(policy::reason_name(pd.reason));
    d.rule = d.route.empty() ? "default-deny" : d.route;
    if (pd.credential) {
      CredentialSpec c;
      c.name = pd.credential->name;
      c.secret_name = pd.credential->secret;
      c.header = pd.credential->header;
      c.format = pd.credential->format;
      c.token = token_of(pd.credential->token);
      d.credential = std::move(c);
    }
    return d;
  }

  Result<std::string> canonicalize_path(std::string_view target) const override {
    auto t = policy::canonicalize_target(target);
    if (!t) return fail(t.error());
    return t->has_query ? t->path + "?" + t->query : t->path;
  }

  bool address_denied(std::string_view ip) const override { return p_->address_denied(ip); }

 private:
  std::shared_ptr<const policy::Policy> p_;
};

class WriterSink final : public AuditSink {
 public:
  explicit WriterSink(std::shared_ptr<audit::Writer> w) : w_(std::move(w)) {}
  Status append(const AuditRecord& r) override {
    auto seq = w_->append(to_audit_event(r));
    if (!seq) return fail(seq.error());
    return {};
  }
  Status health() const override { return w_->health(); }
  int64_t disk_bytes() const override { return static_cast<int64_t>(w_->disk_bytes()); }

 private:
  std::shared_ptr<audit::Writer> w_;
};

// The vault's answers in the ports' terms. Each lookup has a blocking form and a try_ form
// (vault.h): the try_ one answers from the vault's memory or says "would block", so that the
// gateway's io threads never wait on SQLite.

std::optional<SandboxInfo> sandbox_of(const Result<vault::SandboxInfo>& s) {
  if (!s) return std::nullopt;
  return SandboxInfo{s->id, s->profile};
}

std::optional<SandboxInfo> sandbox_of(const Result<std::optional<vault::SandboxInfo>>& s) {
  if (!s || !*s) return std::nullopt;  // unknown address, or the store failed: refused
  return SandboxInfo{(*s)->id, (*s)->profile};
}

class VaultSandboxes final : public SandboxDirectory {
 public:
  VaultSandboxes(std::shared_ptr<vault::Vault> v, std::shared_ptr<SandboxOverlays> o)
      : v_(std::move(v)), overlays_(std::move(o)) {}
  std::optional<SandboxInfo> by_proxy_credentials(std::string_view id,
                                                  std::string_view secret) const override {
    return with_overlay(sandbox_of(v_->verify_sandbox(id, secret)));
  }
  std::optional<SandboxInfo> by_address(std::string_view ip) const override {
    return with_overlay(sandbox_of(v_->sandbox_by_address(ip)));
  }
  NonBlocking<std::optional<SandboxInfo>> try_by_proxy_credentials(
      std::string_view id, std::string_view secret) const override {
    auto s = v_->try_verify_sandbox(id, secret);
    if (!s) return NonBlocking<std::optional<SandboxInfo>>::would_block();
    return with_overlay(sandbox_of(*s));
  }
  NonBlocking<std::optional<SandboxInfo>> try_by_address(std::string_view ip) const override {
    auto s = v_->try_sandbox_by_address(ip);
    if (!s) return NonBlocking<std::optional<SandboxInfo>>::would_block();
    return with_overlay(sandbox_of(*s));
  }

 private:
  std::optional<SandboxInfo> with_overlay(std::optional<SandboxInfo> s) const {
    if (s && overlays_) s->overlay = overlays_->get(s->id);
    return s;
  }
  std::shared_ptr<vault::Vault> v_;
  std::shared_ptr<SandboxOverlays> overlays_;
};

Result<std::string> secret_of(const Result<std::shared_ptr<const vault::SecretValue>>& s) {
  if (!s) return fail(s.error());
  return std::string((*s)->view());
}

std::optional<TokenInfo> token_info_of(const vault::TokenLookup& l) {
  if (l.ok()) {
    TokenInfo t;
    t.id = l.grant().token_id;
    t.credential = l.grant().credential;
    t.sandbox_ok = true;
    t.active = true;
    return t;
  }
  switch (l.refusal()) {
    case vault::TokenRefusal::kRevoked:
    case vault::TokenRefusal::kExpired: {
      TokenInfo t;
      t.sandbox_ok = true;
      t.active = false;
      return t;
    }
    case vault::TokenRefusal::kWrongSandbox: {
      TokenInfo t;
      t.sandbox_ok = false;
      t.active = true;
      return t;
    }
    default:
      return std::nullopt;  // malformed, unknown, store error: refused as misuse
  }
}

class VaultCredentials final : public CredentialSource {
 public:
  explicit VaultCredentials(std::shared_ptr<vault::Vault> v) : v_(std::move(v)) {}
  Result<std::string> secret_value(std::string_view name) const override {
    return secret_of(v_->secret(name));
  }
  std::optional<TokenInfo> lookup_token(std::string_view token,
                                        std::string_view sandbox_id) const override {
    return token_info_of(v_->lookup_token(token, sandbox_id));
  }
  NonBlocking<Result<std::string>> try_secret_value(std::string_view name) const override {
    auto s = v_->try_secret(name);
    if (!s) return NonBlocking<Result<std::string>>::would_block();
    return secret_of(*s);
  }
  NonBlocking<std::optional<TokenInfo>> try_lookup_token(
      std::string_view token, std::string_view sandbox_id) const override {
    auto l = v_->try_lookup_token(token, sandbox_id);
    if (!l) return NonBlocking<std::optional<TokenInfo>>::would_block();
    return token_info_of(*l);
  }

 private:
  std::shared_ptr<vault::Vault> v_;
};

}  // namespace

audit::Event to_audit_event(const AuditRecord& r) {
  audit::Event e;
  e.fields.reserve(16);  // the most added below: one allocation, no regrowth
  // A connection-level record is a refusal unless it was allowed: a passthrough splice.
  if (r.kind == AuditKind::kConnection) {
    e.event = r.decision == AuditDecision::kAllow ? "connection_passthrough" : "connection_refused";
  } else {
    e.event = to_string(r.kind);
  }
  e.sandbox = r.sandbox;
  e.decision = to_string(r.decision);
  e.reason = r.reason;
  if (!r.destination.empty()) {
    e.rule = r.destination + "/" + (r.route.empty() ? r.rule : r.route);
  } else {
    e.rule = r.rule;
  }
  auto add_s = [&](const char* k, const std::string& v) {
    if (!v.empty()) e.add(k, v);
  };
  add_s("request_id", r.request_id);
  add_s("src", r.src);
  add_s("dst", r.dst);
  add_s("sni", r.sni);
  add_s("host", r.host);
  add_s("method", r.method);
  add_s("path", r.path);
  add_s("destination", r.destination);
  add_s("route", r.route);
  if (r.status) e.add("status", static_cast<int64_t>(r.status));
  e.add("bytes_up", static_cast<int64_t>(r.bytes_up));
  e.add("bytes_down", static_cast<int64_t>(r.bytes_down));
  e.add("duration_us", static_cast<int64_t>(r.duration_us));
  add_s("credential", r.credential);
  add_s("token_id", r.token_id);
  for (const auto& [reason, n] : r.counts) e.add("count." + reason, static_cast<int64_t>(n));
  return e;
}

std::shared_ptr<CertProvider> make_cert_provider(std::shared_ptr<ca::LeafCertCache> cache) {
  return std::make_shared<CacheCerts>(std::move(cache));
}
std::shared_ptr<const PolicyView> make_policy_view(std::shared_ptr<const policy::Policy> p) {
  return std::make_shared<PolicyAdapter>(std::move(p));
}
std::shared_ptr<AuditSink> make_audit_sink(std::shared_ptr<audit::Writer> w) {
  return std::make_shared<WriterSink>(std::move(w));
}
std::shared_ptr<SandboxDirectory> make_sandbox_directory(std::shared_ptr<vault::Vault> v) {
  return std::make_shared<VaultSandboxes>(std::move(v), nullptr);
}
std::shared_ptr<SandboxDirectory> make_sandbox_directory(std::shared_ptr<vault::Vault> v,
                                                         std::shared_ptr<SandboxOverlays> o) {
  return std::make_shared<VaultSandboxes>(std::move(v), std::move(o));
}

class LiveOverlay final : public SandboxOverlay {
 public:
  bool permits(std::string_view host) const override {
    std::shared_ptr<const SandboxOverlay> cur;
    {
      std::lock_guard l(mu_);
      cur = cur_;
    }
    if (gone_) return false;
    return !cur || cur->permits(host);
  }
  void set(std::shared_ptr<const SandboxOverlay> o) {
    std::lock_guard l(mu_);
    cur_ = std::move(o);
  }
  void close() { gone_ = true; }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const SandboxOverlay> cur_;
  std::atomic<bool> gone_{false};
};

void SandboxOverlays::set(const std::string& id, std::shared_ptr<const SandboxOverlay> o) {
  std::shared_ptr<const ChangeListener> listener;
  {
    std::lock_guard l(mu_);
    auto& h = map_[id];
    if (!h) h = std::make_shared<LiveOverlay>();
    h->set(std::move(o));
    listener = listener_;
  }
  if (listener && *listener) (*listener)(id);
}

void SandboxOverlays::on_change(ChangeListener listener) {
  auto l = listener ? std::make_shared<const ChangeListener>(std::move(listener)) : nullptr;
  std::lock_guard lk(mu_);
  listener_ = std::move(l);
}

void SandboxOverlays::erase(const std::string& id) {
  std::lock_guard l(mu_);
  auto it = map_.find(id);
  if (it == map_.end()) return;
  it->second->close();  // a connection still holding it refuses from now on
  map_.erase(it);
}

std::shared_ptr<const SandboxOverlay> SandboxOverlays::get(const std::string& id) const {
  std::lock_guard l(mu_);
  auto it = map_.find(id);
  return it == map_.end() ? nullptr : it->second;
}
std::shared_ptr<CredentialSource> make_credential_source(std::shared_ptr<vault::Vault> v) {
  return std::make_shared<VaultCredentials>(std::move(v));
}

}  // namespace cordon::gateway::adapters
