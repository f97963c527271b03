// Thin adapters from cordon's libraries (ca/, policy/, audit/, vault/) to the gateway's ports
// (gateway/ports.h). They translate types and nothing else: every decision stays in the
// library that owns it.
#pragma once

#include <memory>

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
std::shared_ptr<CredentialSource> make_credential_source(std::shared_ptr<vault::Vault> vault);

// The audit event for a record (exposed for tests).
audit::Event to_audit_event(const AuditRecord& record);

}  // namespace cordon::gateway::adapters
