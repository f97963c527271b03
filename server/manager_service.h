// e2b::SandboxService over the real sandbox::Manager: one forwarding line per call.
#pragma once

#include <memory>

#include "e2b/sandbox_service.h"
#include "sandbox/manager/manager.h"

namespace cordon::server {

std::shared_ptr<e2b::SandboxService> make_manager_service(std::shared_ptr<sandbox::Manager> m);

}  // namespace cordon::server
