// A Confinement for a manager that runs beside `cordon serve` rather than inside it (tests,
// tools): the steering program is attached by asking serve over its steering control socket
// (sandbox::steering_attach, as `cordon sandbox netns create` does), and the sandbox is
// registered with the vault under its id, profile and source address, where serve's gateway
// looks it up. The network overlay cannot be expressed in the vault: a sandbox with a
// non-default overlay is refused (never silently widened to its profile).
#pragma once

#include <memory>
#include <string>

#include "common/state_dir.h"
#include "sandbox/manager/manager.h"

namespace cordon::sandbox {

std::shared_ptr<Confinement> make_steering_client_confinement(const StateDir& state);

}  // namespace cordon::sandbox
