// The rules file's `gateway:` section (policy/gateway_settings.h) applied to the gateway's and
// the audit writer's options. Translation only: the bounds are policy's (lint), the defaults the
// components' own (every setting the file leaves out keeps the value of `base`).
#pragma once

#include "audit/writer.h"
#include "gateway/gateway.h"
#include "policy/gateway_settings.h"

namespace cordon::gateway::adapters {

Limits apply_limits(const policy::GatewaySettings& s, Limits base);
h2::H2Limits apply_h2_limits(const policy::GatewaySettings& s, h2::H2Limits base);
audit::RetentionOptions apply_retention(const policy::GatewaySettings& s,
                                        audit::RetentionOptions base);

// At start: every setting, restart-only ones included (limits, h2, http2 on/off, audit rule).
GatewayOptions apply_gateway_settings(const policy::GatewaySettings& s, GatewayOptions base);
// On reload: the snapshot the gateway swaps in (Gateway::set_config). `base` holds the
// defaults (the options before any rules file was applied), so that a setting removed from the
// file returns to its default.
RuntimeOptions runtime_options(const policy::GatewaySettings& s, const GatewayOptions& base);

}  // namespace cordon::gateway::adapters
