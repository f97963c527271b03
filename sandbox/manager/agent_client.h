// A small blocking client of the in-sandbox agent (envd's protocol, e2b-compat.md §4-5) for the
// manager's own needs: health, /init, and running one command through /process.Process/Start
// (Connect server-streaming, JSON codec). One request per connection (Connection: close); the
// caller hands over a connected fd and this closes it.
//
// Trusts nothing the agent sends: status lines, headers, chunk sizes and envelopes are bounded
// (kMaxHeaderBytes, kMaxEnvelopeBytes) and a malformed answer is an error naming what was wrong.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cordon::sandbox {

inline constexpr size_t kMaxAgentHeaderBytes = 16 * 1024;
inline constexpr size_t kMaxAgentEnvelopeBytes = 4 * 1024 * 1024;

struct AgentInit {
  std::map<std::string, std::string> env_vars;
  std::string access_token;
  std::string default_user = "user";
};

struct AgentCommand {
  std::vector<std::string> argv;  // argv[0] = cmd
  std::map<std::string, std::string> envs;
  std::string cwd;
  std::string user = "user";
  std::string access_token;
  int timeout_ms = 60000;  // whole call (also sent as Connect-Timeout-Ms)
  // Asked about once a second while waiting: false ends the call (the sandbox died; its
  // network stack went with it, so no FIN or RST will ever come).
  std::function<bool()> alive;
};

// GET /health -> 204 within timeout_ms.
Status agent_health(int fd, int timeout_ms);
// POST /init -> 2xx.
Status agent_init(int fd, const AgentInit& init, int timeout_ms);
// Start + stream; returns the exit code (-1 when killed by a signal).
Result<int> agent_run(int fd, const AgentCommand& cmd,
                      const std::function<void(std::string_view)>& on_stdout,
                      const std::function<void(std::string_view)>& on_stderr);

// A TCP connection to ip:port within timeout_ms, made in the calling thread's network
// namespace (non-blocking connect + poll).
Result<int> tcp_connect(const std::string& ip, uint16_t port, int timeout_ms);

}  // namespace cordon::sandbox
