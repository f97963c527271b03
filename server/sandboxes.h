// serve's sandbox side: the manager (with the in-process confinement), its control socket and
// the E2B API. Started after the gateway, DNS and steering it relies on; destroyed first, in
// the reverse order of start: E2B API, control socket, manager.
#pragma once

#include <cstdio>
#include <memory>

#include "common/result.h"
#include "gateway/adapters/adapters.h"
#include "sandbox/steering_service.h"
#include "server/server.h"
#include "vault/vault.h"

namespace cordon::server {

class SandboxParts {
 public:
  virtual ~SandboxParts() = default;
};

// Nothing (an empty SandboxParts) when neither --sandboxes nor --api-listen is given.
Result<std::unique_ptr<SandboxParts>> start_sandboxes(
    const ServerOptions& options, const StateDir& state, sandbox::SteeringService* steering,
    std::shared_ptr<vault::Vault> vault,
    std::shared_ptr<gateway::adapters::SandboxOverlays> overlays, std::FILE* log);

}  // namespace cordon::server
