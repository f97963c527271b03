// Network-namespace sandboxes; see netns.h for what this owns and trusts.
#include "sandbox/netns.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "common/file_io.h"
#include "common/subprocess.h"

namespace cordon::sandbox {
namespace {

constexpr const char* kNetnsDir = "/run/netns";
constexpr const char* kEtcNetnsDir = "/etc/netns";
constexpr const char* kLockFile = "/run/cordon-netns.lock";
constexpr const char* kSandboxIfname = "eth0";
constexpr uint32_t kMaxSlots = 65536;  // the IPv6 subnet index is 16 bits

struct Pool {
  uint32_t ipv4_base = 0;  // host order
  uint32_t slots = 0;
  bool ipv6 = false;
  in6_addr ipv6_base{};
};

Result<Pool> parse_pool(const NetnsPool& p) {
  Pool out;
  auto slash = p.ipv4_cidr.find('/');
  if (slash == std::string::npos)
    return fail("netns pool: ipv4_cidr '" + p.ipv4_cidr + "' has no /len");
  in_addr a;
  if (inet_pton(AF_INET, p.ipv4_cidr.substr(0, slash).c_str(), &a) != 1)
    return fail("netns pool: bad ipv4_cidr '" + p.ipv4_cidr + "'");
  int len = atoi(p.ipv4_cidr.c_str() + slash + 1);
  if (len < 8 || len > 30)
    return fail("netns pool: ipv4_cidr '" + p.ipv4_cidr + "' must be /8../30");
  uint32_t mask = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
  out.ipv4_base = ntohl(a.s_addr) & mask;
  out.slots = std::min<uint32_t>(kMaxSlots, uint32_t{1} << (30 - len));
  out.ipv6 = p.ipv6;
  if (p.ipv6) {
    auto s6 = p.ipv6_prefix.find('/');
    if (s6 == std::string::npos ||
        inet_pton(AF_INET6, p.ipv6_prefix.substr(0, s6).c_str(), &out.ipv6_base) != 1)
      return fail("netns pool: bad ipv6_prefix '" + p.ipv6_prefix + "'");
    int len6 = atoi(p.ipv6_prefix.c_str() + s6 + 1);
    if (len6 < 8 || len6 > 48)
      return fail("netns pool: ipv6_prefix '" + p.ipv6_prefix + "' must be /8../48");
    for (int i = 6; i < 16; ++i) out.ipv6_base.s6_addr[i] = 0;
  }
  return out;
}

std::string ipv4_text(uint32_t host_order) {
  in_addr a{htonl(host_order)};
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

std::string ipv6_text(const Pool& pool, uint32_t slot, uint8_t host) {
  in6_addr a = pool.ipv6_base;
  a.s6_addr[6] = static_cast<uint8_t>(slot >> 8);
  a.s6_addr[7] = static_cast<uint8_t>(slot);
  a.s6_addr[15] = host;
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, &a, buf, sizeof buf);
  return buf;
}

NetnsSandbox describe(const std::string& name, const Pool& pool, uint32_t slot) {
  NetnsSandbox s;
  s.name = name;
  s.netns_path = std::string(kNetnsDir) + "/" + name;
  s.host_ifname = host_ifname_for(name);
  s.sandbox_ifname = kSandboxIfname;
  s.host_ipv4 = ipv4_text(pool.ipv4_base + slot * 4 + 1);
  s.sandbox_ipv4 = ipv4_text(pool.ipv4_base + slot * 4 + 2);
  if (pool.ipv6) {
    s.host_ipv6 = ipv6_text(pool, slot, 1);
    s.sandbox_ipv6 = ipv6_text(pool, slot, 2);
  }
  s.resolv_conf = std::string(kEtcNetnsDir) + "/" + name + "/resolv.conf";
  return s;
}

// IPv4 addresses (host order) on interfaces of this namespace, by interface name.
std::vector<std::pair<std::string, uint32_t>> local_ipv4() {
  std::vector<std::pair<std::string, uint32_t>> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* p = list; p; p = p->ifa_next)
    if (p->ifa_addr && p->ifa_addr->sa_family == AF_INET)
      out.emplace_back(p->ifa_name,
                       ntohl(reinterpret_cast<sockaddr_in*>(p->ifa_addr)->sin_addr.s_addr));
  freeifaddrs(list);
  return out;
}

bool exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// Exclusive lock on the allocation of pool slots, released when destroyed.
class AllocationLock {
 public:
  AllocationLock() {
    fd_ = open(kLockFile, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ >= 0) {
      while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~AllocationLock() { release(); }
  void release() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Runs `ip [-n NETNS] -batch -` over `lines` (one fork instead of one per line); on failure
// the error names the line that failed.
Status run_ip_batch(const std::string& netns, const std::vector<std::string>& lines) {
  std::vector<std::string> argv = {"ip"};
  if (!netns.empty()) argv.insert(argv.end(), {"-n", netns});
  argv.insert(argv.end(), {"-batch", "-"});
  std::string script;
  for (const auto& l : lines) script += l + "\n";
  auto r = run_command(argv, script);
  if (!r) return fail(r.error());
  if (r->exit_code == 0) return {};
  std::string out = r->output;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  std::string where = netns.empty() ? "ip -batch" : "ip -n " + netns + " -batch";
  return fail("`" + where + "` exited " + std::to_string(r->exit_code) + ": " + out +
              " (commands: " + script.substr(0, script.size() - 1) + ")");
}

bool is_absent(const std::string& output) {
  return output.find("No such file") != std::string::npos ||
         output.find("Cannot find device") != std::string::npos ||
         output.find("does not exist") != std::string::npos;
}

Status remove_etc_dir(const std::string& name) {
  std::string dir = std::string(kEtcNetnsDir) + "/" + name;
  std::string file = dir + "/resolv.conf";
  if (unlink(file.c_str()) != 0 && errno != ENOENT)
    return fail("netns delete " + name + ": unlink " + file + ": " + strerror(errno));
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT)
    return fail("netns delete " + name + ": rmdir " + dir + ": " + strerror(errno));
  return {};
}

}  // namespace

std::string host_ifname_for(const std::string& name) {
  uint32_t h = 2166136261u;  // FNV-1a: short, stable, no crypto needed for a name
  for (unsigned char c : name) {
    h ^= c;
    h *= 16777619u;
  }
  char buf[16];
  snprintf(buf, sizeof buf, "cdh%08x", h);
  return buf;
}

Status validate_sandbox_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameBytes)
    return fail("sandbox name '" + name + "': must be 1.." + std::to_string(kMaxNameBytes) +
                " bytes");
  if (name == "." || name == "..") return fail("sandbox name '" + name + "' is reserved");
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
      return fail("sandbox name '" + name + "': only a-z 0-9 . _ - allowed");
  return {};
}

Result<NetnsSandbox> create_netns_sandbox(const std::string& name, const NetnsPool& pool_config) {
  if (auto st = validate_sandbox_name(name); !st) return fail(st.error());
  auto pool = parse_pool(pool_config);
  if (!pool) return fail(pool.error());
  std::string path = std::string(kNetnsDir) + "/" + name;
  AllocationLock lock;  // also makes "exists?" and "create" one step for cordon's creators
  if (!lock.ok())
    return fail(std::string("netns create: lock ") + kLockFile + ": " + strerror(errno));
  if (exists(path)) return fail("netns create " + name + ": " + path + " exists already");
  std::string host_if = host_ifname_for(name);
  // A host interface of that name without its namespace is a leftover of a crash.
  if (if_nametoindex(host_if.c_str()) != 0) (void)run_command({"ip", "link", "del", host_if});

  std::set<uint32_t> used;
  for (const auto& [ifname, addr] : local_ipv4()) used.insert(addr);
  uint32_t slot = 0;
  for (; slot < pool->slots; ++slot)
    if (!used.count(pool->ipv4_base + slot * 4 + 1)) break;
  if (slot == pool->slots)
    return fail("netns create " + name + ": address pool " + pool_config.ipv4_cidr + " is full");
  NetnsSandbox s = describe(name, *pool, slot);

  auto undo_and_fail = [&](const Error& e) -> Failure {
    (void)delete_netns_sandbox(name);
    return with_context("netns create " + name, e);
  };
  const std::string v4h = s.host_ipv4 + "/30";
  const std::string v4s = s.sandbox_ipv4 + "/30";
  // If the namespace cannot be added it is not ours: fail without undoing anything.
  if (auto st = run_checked({"ip", "netns", "add", name}); !st)
    return with_context("netns create " + name, st.error());
  // The host side carries the slot's address, which is what the next allocation reads: only
  // this part needs the lock; the sandbox side is configured after it is released, so that
  // concurrent creates queue behind two `ip` runs instead of all of them.
  std::vector<std::string> host = {
      "link add " + host_if + " type veth peer name " + kSandboxIfname + " netns " + name,
      "addr add " + v4h + " dev " + host_if,
  };
  if (pool->ipv6) host.push_back("addr add " + s.host_ipv6 + "/64 dev " + host_if + " nodad");
  host.push_back("link set " + host_if + " up");
  if (auto st = run_ip_batch("", host); !st) return undo_and_fail(st.error());
  lock.release();
  std::vector<std::string> inside = {"addr add " + v4s + " dev " + kSandboxIfname};
  if (pool->ipv6)
    inside.push_back("addr add " + s.sandbox_ipv6 + "/64 dev " + kSandboxIfname + " nodad");
  inside.push_back("link set lo up");
  inside.push_back(std::string("link set ") + kSandboxIfname + " up");
  inside.push_back("route add default via " + s.host_ipv4);
  if (pool->ipv6) inside.push_back("route add default via " + s.host_ipv6);
  if (auto st = run_ip_batch(name, inside); !st) return undo_and_fail(st.error());

  std::string resolv =
      "# written by cordon: the gateway's DNS responder\nnameserver " + s.host_ipv4 + "\n";
  if (pool->ipv6) resolv += "nameserver " + s.host_ipv6 + "\n";
  if (auto st = ensure_directory(std::string(kEtcNetnsDir) + "/" + name, 0755); !st)
    return undo_and_fail(st.error());
  if (auto st = write_file_atomic(s.resolv_conf, resolv, 0644); !st)
    return undo_and_fail(st.error());
  s.host_ifindex = static_cast<int>(if_nametoindex(host_if.c_str()));
  if (s.host_ifindex == 0) return undo_and_fail(Error{"host interface " + host_if + " vanished"});
  return s;
}

Result<NetnsSandbox> find_netns_sandbox(const std::string& name, const NetnsPool& pool_config) {
  if (auto st = validate_sandbox_name(name); !st) return fail(st.error());
  auto pool = parse_pool(pool_config);
  if (!pool) return fail(pool.error());
  if (!exists(std::string(kNetnsDir) + "/" + name))
    return fail("netns " + name + ": no such namespace");
  std::string host_if = host_ifname_for(name);
  for (const auto& [ifname, addr] : local_ipv4()) {
    if (ifname != host_if || addr < pool->ipv4_base) continue;
    uint32_t offset = addr - pool->ipv4_base;
    if (offset % 4 != 1 || offset / 4 >= pool->slots) continue;
    NetnsSandbox s = describe(name, *pool, offset / 4);
    s.host_ifindex = static_cast<int>(if_nametoindex(host_if.c_str()));
    return s;
  }
  return fail("netns " + name + ": host interface " + host_if + " has no address from " +
              pool_config.ipv4_cidr);
}

Status delete_netns_sandbox(const std::string& name) {
  if (auto st = validate_sandbox_name(name); !st) return fail(st.error());
  // Deleting the host end removes the pair at once, even if a process keeps the namespace.
  std::string host_if = host_ifname_for(name);
  if (if_nametoindex(host_if.c_str()) != 0) {
    auto r = run_command({"ip", "link", "del", host_if});
    if (!r) return with_context("netns delete " + name, r.error());
    if (r->exit_code != 0 && !is_absent(r->output))
      return fail("netns delete " + name + ": ip link del " + host_if + ": " + r->output);
  }
  if (exists(std::string(kNetnsDir) + "/" + name)) {
    auto r = run_command({"ip", "netns", "del", name});
    if (!r) return with_context("netns delete " + name, r.error());
    if (r->exit_code != 0 && !is_absent(r->output))
      return fail("netns delete " + name + ": ip netns del: " + r->output);
  }
  return remove_etc_dir(name);
}

std::vector<std::string> list_netns(const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = opendir(kNetnsDir)) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && n.compare(0, prefix.size(), prefix) == 0) out.push_back(n);
    }
    closedir(d);
  }
  return out;
}

Result<std::vector<std::string>> sweep_netns_sandboxes(const std::string& prefix) {
  if (prefix.empty()) return fail("netns sweep: empty prefix would match every namespace");
  std::vector<std::string> removed;
  std::string errors;
  for (const auto& n : list_netns(prefix)) {
    if (auto st = delete_netns_sandbox(n); !st)
      errors += " " + st.error().message + ";";
    else
      removed.push_back(n);
  }
  // resolv.conf directories whose namespace is already gone.
  if (DIR* d = opendir(kEtcNetnsDir)) {
    std::vector<std::string> stale;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && n.compare(0, prefix.size(), prefix) == 0) stale.push_back(n);
    }
    closedir(d);
    for (const auto& n : stale)
      if (validate_sandbox_name(n)) (void)remove_etc_dir(n);
  }
  if (!errors.empty()) return fail("netns sweep '" + prefix + "':" + errors);
  return removed;
}

Result<std::unique_ptr<ScopedNetns>> ScopedNetns::enter(const std::string& name_or_path) {
  std::string path = name_or_path.find('/') == std::string::npos
                         ? std::string(kNetnsDir) + "/" + name_or_path
                         : name_or_path;
  int saved = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (saved < 0) return fail(std::string("netns enter: open own namespace: ") + strerror(errno));
  int target = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0) {
    int err = errno;
    close(saved);
    return fail("netns enter " + path + ": " + strerror(err));
  }
  int rc = setns(target, CLONE_NEWNET);
  int err = errno;
  close(target);
  if (rc != 0) {
    close(saved);
    return fail("netns enter " + path + ": setns: " + strerror(err));
  }
  return std::unique_ptr<ScopedNetns>(new ScopedNetns(saved));
}

ScopedNetns::~ScopedNetns() {
  // Going back can only fail if the saved namespace fd is bad, which it cannot be here.
  (void)setns(saved_fd_, CLONE_NEWNET);
  close(saved_fd_);
}

}  // namespace cordon::sandbox
