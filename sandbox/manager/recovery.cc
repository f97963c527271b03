// After a restart of the process hosting the manager (a killed `cordon serve`): adopt the
// sandboxes that still run, reap the rest, sweep what no record owns.
//
// The rule: the manager writes a sandbox's record before it makes any resource for it and
// deletes the record after the last one is gone. So every namespace, veth, steering attachment,
// registration, cgroup, mount, directory and runsc container a crash can leave belongs to some
// record, and reaping records removes them. What no record owns (the database lost or replaced)
// is found by name: namespaces and cgroups named "<name_prefix>*", runsc containers in this
// manager's runsc root, directories in <state>/sandboxes.
#include <dirent.h>
#include <signal.h>

#include <filesystem>
#include <set>

#include "sandbox/manager/agent_client.h"
#include "sandbox/manager/cgroup.h"
#include "sandbox/manager/detail/impl.h"

namespace cordon::sandbox {

Status Manager::Impl::recover() {
  auto stored = registry->list();
  if (!stored) return fail(stored.error());
  std::vector<StoredSandbox> reap;
  for (auto& s : *stored) {
    if (!s.node.empty() && s.node != node) continue;  // another node's (shared registry)
    Backend* b = backend_for(s.record.backend);
    bool keep = false;
    if (b && (s.phase == Phase::kRunning || s.phase == Phase::kPaused)) {
      auto st = b->status(backend_view(s));
      if (st && st->state == BackendState::kPaused && s.phase == Phase::kPaused) {
        keep = true;
      } else if (st && st->state == BackendState::kRunning) {
        // Re-confine first (idempotent), then ask the agent: a sandbox whose agent is gone is
        // of no use to anyone.
        keep = o.confinement->attach(s.record.id, s.host_interface, s.record.address, s.ipv6) &&
               o.confinement->register_sandbox(s.record) &&
               wait_agent(s, std::chrono::milliseconds(3000));
        if (keep && s.phase == Phase::kPaused) s.phase = Phase::kRunning;
      }
      if (keep && st) {
        s.host_pids = st->host_pids;
      }
    }
    if (keep) {
      // Its template stays in use (a kill -9 of the previous manager released the lease). One
      // removed in between took the sandbox's lower layer with it: nothing to adopt.
      auto t = o.find_template(s.record.template_id);
      keep = t && lease_template(s.record.id, *t);
    }
    if (keep) {
      s.record.state = s.phase == Phase::kPaused ? SandboxState::kPaused : SandboxState::kRunning;
      sandboxes[s.record.id] = s;
    } else {
      reap.push_back(s);
    }
  }
  std::string errors;
  for (auto& s : reap) {
    s.phase = Phase::kDestroying;
    if (auto st = destroy(s); !st) errors += " " + st.error().message + ";";
  }
  if (auto st = sweep(); !st) errors += " " + st.error().message + ";";
  if (!errors.empty())
    return fail("sandbox manager: reaping the previous run's sandboxes:" + errors);
  return {};
}

Status Manager::Impl::sweep() {
  std::set<std::string> owned_ids, owned_netns;
  for (const auto& [id, s] : sandboxes) {
    owned_ids.insert(id);
    owned_ids.insert(s.container_id);
    owned_netns.insert(s.netns);
  }
  std::string errors;
  // runsc containers and directories without a record.
  std::set<std::string> orphans;
  for (const auto& id : gvisor->known_ids())
    if (!owned_ids.count(id)) orphans.insert(id);
  if (DIR* d = opendir(sandboxes_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && !owned_ids.count(n)) orphans.insert(n);
    }
    closedir(d);
  }
  for (const auto& id : orphans) {
    StoredSandbox s;
    s.record.id = id;
    s.record.backend = "gvisor";
    s.container_id = id;
    s.dir = sandboxes_dir + "/" + id;
    s.netns = o.name_prefix + id;
    s.cgroup = "/cordon/" + s.netns;
    if (auto st = gvisor->destroy(backend_view(s)); !st) errors += " " + st.error().message + ";";
    // A microVM's monitor is found through the directory's state file.
    if (auto st = microvm->destroy(backend_view(s)); !st) errors += " " + st.error().message + ";";
    std::error_code ec;
    std::filesystem::remove_all(s.dir, ec);
  }
  // Namespaces (and their veths) without a record; their steering attachment goes with them.
  {
    auto in = enter_gateway();
    if (!in) return fail(in.error());
    for (const auto& name : list_netns(o.name_prefix)) {
      if (owned_netns.count(name)) continue;
      if (auto st = delete_netns_sandbox(name); !st) errors += " " + st.error().message + ";";
      (void)o.confinement->detach(host_ifname_for(name));
      std::string id = name.substr(o.name_prefix.size());
      (void)o.confinement->unregister_sandbox(id);
    }
  }
  // Cgroups without a record (runsc removes its own; these are a crash's).
  for (const auto& name : cgroup::children("/cordon")) {
    if (name.compare(0, o.name_prefix.size(), o.name_prefix) != 0 || owned_netns.count(name))
      continue;
    std::string path = "/cordon/" + name;
    for (int pid : cgroup::procs(path)) ::kill(pid, SIGKILL);
    for (int i = 0; i < 50 && !cgroup::remove(path); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!errors.empty()) return fail("sweep:" + errors);
  return {};
}

}  // namespace cordon::sandbox
