// envd's plain-HTTP endpoints (e2b-compat.md §7): GET /health, GET /envs, GET /metrics,
// POST /init; and the access-token gate every request passes first.
#pragma once

#include "agent/agent_state.h"
#include "agent/http/server.h"

namespace cordon::agent {

void register_envd_endpoints(http::Router& router, AgentState& state);

// True when the request may proceed. Once /init set a token, every path but GET /health and
// /files (whose handler accepts a token or a signature itself) needs X-Access-Token; /init too,
// so that a process in the sandbox cannot replace the token. Otherwise the 401 has been sent.
bool check_access(http::Exchange& ex, const AgentState& state);

}  // namespace cordon::agent
