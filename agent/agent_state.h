// What the agent knows about its sandbox: the defaults that `POST /init` sets (env vars,
// access token, default user and working directory, extra CA bundle) and the Unix users that a
// request may act as. Shared by every handler; thread-safe.
#pragma once

#include <sys/types.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/http/exchange.h"
#include "common/result.h"

namespace cordon::agent {

struct UnixUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
  std::string home;
  std::string shell;
};

// Where the agent reads users and the template's defaults. Tests point these at temporary
// files (the agent's hidden --passwd-file/--group-file flags) instead of the host's.
struct AgentPaths {
  std::string passwd = "/etc/passwd";
  std::string group = "/etc/group";
  std::string system_ca_bundle = "/etc/ssl/certs/ca-certificates.crt";
  std::string template_env = "/etc/cordon/template.env";      // KEY=VALUE lines
  std::string extra_ca_bundle = "/etc/cordon/ca-bundle.pem";  // system bundle + /init caBundle
};

// Looks the user up in the passwd/group files of `paths` (the defaults: /etc/passwd and
// /etc/group). Fails with a message naming the user when there is none.
Result<UnixUser> lookup_user(const std::string& name, const AgentPaths& paths = {});

struct InitSettings {
  std::map<std::string, std::string> env_vars;
  std::optional<std::string> access_token;
  std::string default_user = "user";
  std::string default_workdir;           // empty = the user's home
  std::optional<std::string> ca_bundle;  // PEM appended to the system bundle
};

class AgentState {
 public:
  explicit AgentState(AgentPaths paths = {});

  const AgentPaths& paths() const { return paths_; }
  InitSettings settings() const;  // a copy
  // Stores the settings; a ca_bundle is written (system bundle + it) to
  // paths().extra_ca_bundle, which the CA variables of every later process then name.
  Status apply_init(const InitSettings& s);

  // Looks a user up in this state's passwd/group files.
  Result<UnixUser> user(const std::string& name) const { return lookup_user(name, paths_); }

  // The environment of every process the agent starts for `user`: a fixed base (PATH, HOME,
  // USER, LOGNAME, SHELL, the CA variables of the template), then the /init env vars, then
  // `request_envs`. The agent's own environment is never inherited.
  std::map<std::string, std::string> process_env(
      const UnixUser& user, const std::map<std::string, std::string>& request_envs) const;

  // The user a request acts as: Basic-auth user name, else ?username=, else the default user.
  // Fails (with the user's name in the message) when that user does not exist.
  Result<UnixUser> request_user(const http::RequestHead& head) const;

  // Access-token check (constant time). True when no token is set or the request carries the
  // right X-Access-Token.
  bool token_ok(const http::RequestHead& head) const;
  std::optional<std::string> access_token() const;

  // The working directory a process of `user` starts in when the request names none.
  std::string default_cwd(const UnixUser& user) const;

 private:
  AgentPaths paths_;
  std::map<std::string, std::string> template_env_;  // read once at start
  mutable std::mutex mu_;
  InitSettings s_;
  std::string ca_file_;  // the bundle the CA variables point at; empty = none
};

}  // namespace cordon::agent
