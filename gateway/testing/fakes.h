// In-memory fakes of the gateway's ports, for unit and end-to-end tests. They implement the
// contract of gateway/ports.h literally and nothing more (e.g. the fake policy's path check
// refuses every ambiguous shape rather than canonicalizing).
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gateway/ports.h"
#include "gateway/testing/test_pki.h"

namespace cordon::gateway::testing {

class FakeCerts : public CertProvider {
 public:
  FakeCerts() : ca_("cordon test interception CA"), key_(make_ec_key()) {}
  Result<LeafCert> leaf_for(std::string_view sni) override;
  const TestCa& ca() const { return ca_; }
  int mints() const {
    std::lock_guard lk(mu_);
    return mints_;
  }

 private:
  TestCa ca_;
  std::shared_ptr<EVP_PKEY> key_;
  mutable std::mutex mu_;
  int mints_ = 0;
  std::map<std::string, LeafCert, std::less<>> cache_;  // by name (tests mint few)
};

struct FakeRoute {
  std::string id;
  bool allow = true;
  std::vector<std::string> methods;  // empty = any
  std::string path_prefix;           // empty = any
  std::optional<CredentialSpec> credential;
};

struct FakeDestination {
  std::string id;
  std::vector<std::string> hosts;  // exact
  std::vector<uint16_t> ports;
  TlsMode tls = TlsMode::kIntercept;
  bool plaintext_credentials = false;
  std::vector<FakeRoute> routes;
  bool scrub_response_body = true;
};

class FakePolicy : public PolicyView {
 public:
  std::map<std::string, std::vector<std::string>> profiles;  // profile → destination ids
  std::vector<FakeDestination> destinations;
  std::vector<std::string> denied_prefixes = {"127.", "10.", "169.254.", "192.168.", "::1"};
  bool report_mode = false;

  std::optional<DestinationInfo> destination(std::string_view profile, std::string_view host,
                                             uint16_t port) const override;
  Decision decide(const RequestFacts& facts) const override;
  Result<std::string> canonicalize_path(std::string_view target) const override;
  bool address_denied(std::string_view ip) const override;

 private:
  const FakeDestination* find(std::string_view profile, std::string_view host, uint16_t port) const;
};

class FakeSandboxes : public SandboxDirectory {
 public:
  void add(const std::string& id, const std::string& secret, const std::string& profile,
           const std::string& address = {});
  std::optional<SandboxInfo> by_proxy_credentials(std::string_view id,
                                                  std::string_view secret) const override;
  std::optional<SandboxInfo> by_address(std::string_view ip) const override;

 private:
  mutable std::mutex mu_;
  struct Entry {
    std::string secret;
    SandboxInfo info;
    std::string address;
  };
  std::map<std::string, Entry, std::less<>> by_id_;
};

class FakeCredentials : public CredentialSource {
 public:
  // A string of the proxy-token shape ("cdn_<id>_<43 base64url characters>", vault.h) for
  // `id`; `fill` varies the secret part.
  static std::string make_token(const std::string& id, char fill = 'A');
  void put_secret(const std::string& name, const std::string& value);
  // A token bound to `sandbox` (empty = unbound) and `credential`.
  void put_token(const std::string& token, const std::string& id, const std::string& sandbox,
                 const std::string& credential);
  void revoke(const std::string& token);
  Result<std::string> secret_value(std::string_view secret_name) const override;
  std::optional<TokenInfo> lookup_token(std::string_view token,
                                        std::string_view sandbox_id) const override;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string, std::less<>> secrets_;
  struct Token {
    std::string id, sandbox, credential;
    bool active = true;
  };
  std::map<std::string, Token, std::less<>> tokens_;
};

class MemoryAudit : public AuditSink {
 public:
  Status append(const AuditRecord& record) override;
  Status health() const override;
  std::vector<AuditRecord> records() const;
  void clear();
  int64_t disk_bytes() const override { return disk_bytes_.load(); }
  void set_disk_bytes(int64_t n) { disk_bytes_ = n; }
  void set_failing(bool f) {
    std::lock_guard lk(mu_);
    failing_ = f;
  }
  // The next `n` appends fail while health() still says OK: the log breaking between the
  // check before forwarding and the line written after the answer.
  void fail_next_appends(int n) {
    std::lock_guard lk(mu_);
    fail_next_ = n;
  }

 private:
  std::atomic<int64_t> disk_bytes_{-1};
  mutable std::mutex mu_;
  std::vector<AuditRecord> records_;
  bool failing_ = false;
  int fail_next_ = 0;
};

}  // namespace cordon::gateway::testing
