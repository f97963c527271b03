// What a sandbox can leave on the host, as a comparable snapshot: network namespaces,
// interfaces, cgroups under /cordon, mounts, runsc processes, runsc state dirs. Tests take one
// before and after and compare. Header-only.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "common/subprocess.h"
#include "sandbox/manager/cgroup.h"
#include "sandbox/netns.h"

namespace cordon::testing {

struct Leftovers {
  std::set<std::string> items;
  bool empty() const { return items.empty(); }

  // Only what carries `needle` (the test's pid: other suites run at the same time).
  static Leftovers snapshot(const std::string& needle) {
    Leftovers l;
    l.items.insert("marker");
    for (const auto& n : sandbox::list_netns(""))
      if (n.find(needle) != std::string::npos) l.items.insert("netns " + n);
    if (auto r = run_command({"ip", "-o", "link"}))
      for (std::istringstream in(r->output); in;) {
        std::string line;
        std::getline(in, line);
        auto a = line.find(": ");
        if (a == std::string::npos) continue;
        auto b = line.find_first_of(":@", a + 2);
        if (line.find("cdh") != std::string::npos)
          l.items.insert("link " + line.substr(a + 2, b - a - 2));
      }
    for (const auto& c : sandbox::cgroup::children("/cordon"))
      if (c.find(needle) != std::string::npos) l.items.insert("cgroup " + c);
    std::ifstream mounts("/proc/self/mounts");
    for (std::string line; std::getline(mounts, line);)
      if (line.find("cordon-sbx") != std::string::npos && line.find(needle) != std::string::npos)
        l.items.insert("mount " + line);
    if (DIR* d = opendir("/proc")) {
      while (dirent* e = readdir(d)) {
        std::ifstream f(std::string("/proc/") + e->d_name + "/comm");
        std::string comm;
        if (!(f >> comm)) continue;
        std::ifstream c(std::string("/proc/") + e->d_name + "/cmdline");
        std::string cmd((std::istreambuf_iterator<char>(c)), {});
        if (cmd.find("cordon-sbx") != std::string::npos && cmd.find(needle) != std::string::npos)
          l.items.insert("process " + cmd.substr(0, 120));
      }
      closedir(d);
    }
    return l;
  }

  static std::string diff(const Leftovers& before, const Leftovers& after) {
    std::string out;
    for (const auto& i : after.items)
      if (!before.items.count(i)) out += "  + " + i + "\n";
    return out;
  }
};

}  // namespace cordon::testing
