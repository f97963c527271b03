// A "sandbox" as a network namespace (until the sandbox manager exists, issue 5): a named
// namespace (/run/netns/<name>) with a veth pair whose host side stays in the caller's
// namespace, where `cordon serve` runs and the steering program is attached, and whose other
// side is `eth0` inside. Addresses come from a pool: a /30 per sandbox from an IPv4 range and
// a /64 per sandbox from an IPv6 ULA /48; the default routes point at the host side, and
// /etc/netns/<name>/resolv.conf names the host side (the gateway's DNS responder).
//
// Owns: the namespace, the veth pair, the resolv.conf directory. Nothing else.
// Trusts: the caller for names (validated: [a-z0-9._-], at most kMaxNameBytes). Set up by
// running `ip` (no shell); allocation is serialized with a lock file so that concurrent
// creators in one namespace do not take the same /30. Acts in the calling thread's netns.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace cordon::sandbox {

inline constexpr size_t kMaxNameBytes = 48;

struct NetnsPool {
  std::string ipv4_cidr = "10.200.0.0/16";  // split into /30s: .1 host side, .2 sandbox
  bool ipv6 = true;
  std::string ipv6_prefix = "fd63:6f72:646e::/48";  // split into /64s: ::1 host, ::2 sandbox
};

struct NetnsSandbox {
  std::string name;
  std::string netns_path;   // /run/netns/<name>
  std::string host_ifname;  // in the caller's namespace: attach the steering here
  int host_ifindex = 0;
  std::string sandbox_ifname;  // inside the namespace ("eth0")
  std::string host_ipv4;       // gateway address as the sandbox sees it
  std::string sandbox_ipv4;
  int ipv4_prefix_len = 30;
  std::string host_ipv6;  // empty if the pool has no IPv6
  std::string sandbox_ipv6;
  int ipv6_prefix_len = 64;
  std::string resolv_conf;  // /etc/netns/<name>/resolv.conf
};

// Host-side interface name for a sandbox name ("cdh" + 8 hex digits of a hash; fits IFNAMSIZ).
std::string host_ifname_for(const std::string& name);

Status validate_sandbox_name(const std::string& name);

// Creates the namespace, veth pair, addresses, routes and resolv.conf. Fails if the namespace
// exists; on failure removes what it made.
Result<NetnsSandbox> create_netns_sandbox(const std::string& name, const NetnsPool& pool = {});

// Describes an existing sandbox namespace created by create_netns_sandbox.
Result<NetnsSandbox> find_netns_sandbox(const std::string& name, const NetnsPool& pool = {});

// Removes the veth pair, the namespace and resolv.conf; succeeds if already gone.
Status delete_netns_sandbox(const std::string& name);

// Deletes every sandbox namespace (and /etc/netns directory) whose name starts with
// `prefix` (non-empty). Returns the names removed.
Result<std::vector<std::string>> sweep_netns_sandboxes(const std::string& prefix);

// Names of the namespaces in /run/netns starting with `prefix`.
std::vector<std::string> list_netns(const std::string& prefix);

// Moves the calling thread (only it: network namespaces are per thread) into a namespace,
// given by name (/run/netns/<name>) or path, and back when destroyed.
class ScopedNetns {
 public:
  static Result<std::unique_ptr<ScopedNetns>> enter(const std::string& name_or_path);
  ~ScopedNetns();
  ScopedNetns(const ScopedNetns&) = delete;
  ScopedNetns& operator=(const ScopedNetns&) = delete;

 private:
  explicit ScopedNetns(int saved_fd) : saved_fd_(saved_fd) {}
  int saved_fd_;
};

}  // namespace cordon::sandbox
