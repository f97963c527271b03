// filesystem.Filesystem over Connect (e2b-compat.md §6): Stat, MakeDir, Move, ListDir, Remove
// (unary) and WatchDir (server stream), acting as the request's user.
#pragma once

#include "agent/agent_state.h"
#include "agent/http/exchange.h"

namespace cordon::agent::filesystem {

// Serves a request whose path is /filesystem.Filesystem/<Method>; returns false (having sent
// nothing) for any other path. Unknown methods get unimplemented; the polling watcher methods
// (CreateWatcher, GetWatcherEvents, RemoveWatcher), which the SDK never calls, too.
bool handle_filesystem(http::Exchange& ex, AgentState& state);

}  // namespace cordon::agent::filesystem
