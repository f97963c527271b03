// Thin adapters from cordon's libraries (ca/, policy/, audit/, vault/) to the gateway's ports
// (gateway/ports.h). They translate types and nothing else: every decision stays in the
// library that owns it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "audit/writer.h"
#include "ca/leaf_cache.h"
#include "gateway/ports.h"
#include "policy/policy.h"
#include "vault/vault.h"

namespace cordon::gateway::adapters {

std::shared_ptr<CertProvider> make_cert_provider(std::shared_ptr<ca::LeafCertCache> cache);

// One immutable policy snapshot as a PolicyView (keeps the snapshot alive).
std::shared_ptr<const PolicyView> make_policy_view(std::shared_ptr<const policy::Policy> policy);

std::shared_ptr<AuditSink> make_audit_sink(std::shared_ptr<audit::Writer> writer);

std::shared_ptr<SandboxDirectory> make_sandbox_directory(std::shared_ptr<vault::Vault> vault);

class LiveOverlay;

// Per-sandbox overlays (E2B network settings), set by whoever creates sandboxes (server/) and
// attached to every SandboxInfo the directory answers. Thread-safe; bounded by the sandboxes.
class SandboxOverlays {
 public:
  // Replaces the sandbox's overlay, then tells the change listener (outside the lock).
  void set(const std::string& sandbox_id, std::shared_ptr<const SandboxOverlay> overlay);
  void erase(const std::string& sandbox_id);
  std::shared_ptr<const SandboxOverlay> get(const std::string& sandbox_id) const;

  // Called with the sandbox id after every set(), on the caller's thread: the server ends the
  // sandbox's open connections the new overlay refuses there (Gateway::end_refused_connections;
  // new requests meet the new overlay anyway). Empty: none. It must not call back into this.
  using ChangeListener = std::function<void(const std::string& sandbox_id)>;
  void on_change(ChangeListener listener);

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const ChangeListener> listener_;
  // One holder per sandbox, handed out once and updated in place, so that a change reaches
  // the connections already open on their next request.
  std::map<std::string, std::shared_ptr<LiveOverlay>> map_;
};
std::shared_ptr<SandboxDirectory> make_sandbox_directory(std::shared_ptr<vault::Vault> vault,
                                                         std::shared_ptr<SandboxOverlays> overlays);
std::shared_ptr<CredentialSource> make_credential_source(std::shared_ptr<vault::Vault> vault);

// The audit event for a record (exposed for tests).
audit::Event to_audit_event(const AuditRecord& record);

}  // namespace cordon::gateway::adapters
