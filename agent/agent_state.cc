#include "agent/agent_state.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/encoding.h"

namespace cordon::agent {

namespace {

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = line.find(sep, start);
    out.push_back(line.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

std::optional<uint32_t> parse_id(const std::string& s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  uint64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (n > 0xffffffffULL) return std::nullopt;
  return static_cast<uint32_t>(n);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// KEY=VALUE lines; blank lines and '#' comments skipped; no quoting.
std::map<std::string, std::string> read_env_file(const std::string& path) {
  std::map<std::string, std::string> out;
  auto text = read_file(path);
  if (!text) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq == 0 || eq == std::string::npos) continue;
    out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

}  // namespace

Result<UnixUser> lookup_user(const std::string& name, const AgentPaths& paths) {
  if (name.empty()) return fail("empty user name");
  auto passwd = read_file(paths.passwd);
  if (!passwd) return fail("looking up user '" + name + "': " + passwd.error().message);
  std::istringstream in(*passwd);
  std::string line;
  std::optional<UnixUser> found;
  while (std::getline(in, line)) {
    auto f = split(line, ':');
    if (f.size() < 7 || f[0] != name) continue;
    auto uid = parse_id(f[2]);
    auto gid = parse_id(f[3]);
    if (!uid || !gid) return fail("user '" + name + "': malformed entry in " + paths.passwd);
    found = UnixUser{name, *uid, *gid, {}, f[5], f[6]};
    break;
  }
  if (!found) return fail("user '" + name + "' does not exist");
  if (auto group = read_file(paths.group)) {
    std::istringstream gin(*group);
    while (std::getline(gin, line)) {
      auto f = split(line, ':');
      if (f.size() < 4) continue;
      auto gid = parse_id(f[2]);
      if (!gid) continue;
      for (const auto& member : split(f[3], ',')) {
        if (member == name) {
          found->groups.push_back(*gid);
          break;
        }
      }
    }
  }
  return *found;
}

AgentState::AgentState(AgentPaths paths) : paths_(std::move(paths)) {
  template_env_ = read_env_file(paths_.template_env);
  if (file_exists(paths_.system_ca_bundle)) ca_file_ = paths_.system_ca_bundle;
}

InitSettings AgentState::settings() const {
  std::lock_guard lock(mu_);
  return s_;
}

Status AgentState::apply_init(const InitSettings& s) {
  std::string ca_file;
  if (s.ca_bundle && !s.ca_bundle->empty()) {
    std::string bundle;
    if (auto sys = read_file(paths_.system_ca_bundle)) bundle = *sys;
    if (!bundle.empty() && bundle.back() != '\n') bundle.push_back('\n');
    bundle += *s.ca_bundle;
    if (bundle.back() != '\n') bundle.push_back('\n');
    std::string dir = paths_.extra_ca_bundle.substr(0, paths_.extra_ca_bundle.rfind('/'));
    if (!dir.empty()) ::mkdir(dir.c_str(), 0755);
    std::string tmp = paths_.extra_ca_bundle + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << bundle;
      if (!out.flush()) return fail("writing the CA bundle " + tmp + ": " + std::strerror(errno));
    }
    ::chmod(tmp.c_str(), 0644);
    if (::rename(tmp.c_str(), paths_.extra_ca_bundle.c_str()) != 0) {
      return fail("installing the CA bundle " + paths_.extra_ca_bundle + ": " +
                  std::strerror(errno));
    }
    ca_file = paths_.extra_ca_bundle;
  }
  std::lock_guard lock(mu_);
  s_ = s;
  if (!ca_file.empty()) ca_file_ = ca_file;
  return {};
}

std::map<std::string, std::string> AgentState::process_env(
    const UnixUser& user, const std::map<std::string, std::string>& request_envs) const {
  std::map<std::string, std::string> env;
  env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  env["HOME"] = user.home.empty() ? "/" : user.home;
  env["USER"] = user.name;
  env["LOGNAME"] = user.name;
  env["SHELL"] = user.shell.empty() ? "/bin/bash" : user.shell;
  std::lock_guard lock(mu_);
  if (!ca_file_.empty()) {
    for (const char* k :
         {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"}) {
      env[k] = ca_file_;
    }
  }
  for (const auto& [k, v] : template_env_) env[k] = v;
  for (const auto& [k, v] : s_.env_vars) env[k] = v;
  for (const auto& [k, v] : request_envs) env[k] = v;
  return env;
}

Result<UnixUser> AgentState::request_user(const http::RequestHead& head) const {
  std::string name;
  if (const std::string* auth = head.header("authorization")) {
    std::string_view v = *auth;
    if (v.size() > 6 && (v.substr(0, 6) == "Basic " || v.substr(0, 6) == "basic ")) {
      auto decoded = base64_decode(v.substr(6));
      if (!decoded) return fail("malformed Basic authorization header");
      name = decoded->substr(0, decoded->find(':'));
    }
  }
  if (name.empty()) {
    if (const std::string* u = head.query_param("username")) name = *u;
  }
  if (name.empty()) {
    std::lock_guard lock(mu_);
    name = s_.default_user;
  }
  return lookup_user(name, paths_);
}

bool AgentState::token_ok(const http::RequestHead& head) const {
  std::lock_guard lock(mu_);
  if (!s_.access_token) return true;
  const std::string* got = head.header("x-access-token");
  if (!got) return false;
  return constant_time_equal(*got, *s_.access_token);
}

std::optional<std::string> AgentState::access_token() const {
  std::lock_guard lock(mu_);
  return s_.access_token;
}

std::string AgentState::default_cwd(const UnixUser& user) const {
  std::lock_guard lock(mu_);
  if (!s_.default_workdir.empty()) return s_.default_workdir;
  return user.home.empty() ? "/" : user.home;
}

}  // namespace cordon::agent
