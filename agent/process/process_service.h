// process.Process over the Connect protocol (e2b-compat.md §5): Start, Connect, List,
// SendInput, SendSignal, CloseStdin, Update at /process.Process/<Method>.
#pragma once

#include "agent/agent_state.h"
#include "agent/http/exchange.h"
#include "agent/process/process_manager.h"

namespace cordon::agent::process {

// Serves the request when its path is a process.Process method and returns true; returns
// false (nothing sent) for any other path.
bool handle_process(http::Exchange& ex, AgentState& state, ProcessManager& mgr);

}  // namespace cordon::agent::process
