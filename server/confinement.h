// serve's in-process sandbox::Confinement: the steering program on the sandbox's host
// interface (SteeringService::attach), its identity in the vault (register_sandbox, which the
// gateway finds by source address) and its E2B network overlay in the gateway
// (adapters::SandboxOverlays). Without steering it refuses to attach: an unconfined sandbox
// never runs.
#pragma once

#include <memory>

#include "gateway/adapters/adapters.h"
#include "sandbox/manager/manager.h"
#include "sandbox/steering_service.h"
#include "vault/vault.h"

namespace cordon::server {

// The gateway port for an E2B overlay (nullptr when it narrows nothing). Error = a pattern
// that does not compile (the API validated it already, so only a manager bug gets here).
Result<std::shared_ptr<const gateway::SandboxOverlay>> gateway_overlay(
    const sandbox::NetworkOverlay& n);

std::shared_ptr<sandbox::Confinement> make_confinement(
    sandbox::SteeringService* steering, std::shared_ptr<vault::Vault> vault,
    std::shared_ptr<gateway::adapters::SandboxOverlays> overlays);

}  // namespace cordon::server
