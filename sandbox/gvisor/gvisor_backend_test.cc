// Unit tests of the gVisor backend's OCI spec (no runsc needed). Lifecycle tests that run runsc
// are in tests/e2e/sandbox/.
#include "sandbox/gvisor/gvisor_backend.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace cordon::sandbox {
namespace {

using nlohmann::json;

BackendSandbox sample() {
  BackendSandbox s;
  s.id = "abcdefghij0123456789";
  s.dir = "/var/lib/cordon/sandboxes/abcdefghij0123456789";
  s.rootfs_dir = "/var/lib/cordon/templates/t/rootfs";
  s.netns_path = "/run/netns/cdsb-abcdefghij0123456789";
  s.gateway_ipv4 = "10.201.0.1";
  s.cgroup = "/cordon/cdsb-abcdefghij0123456789";
  s.resources.cpu_millis = 500;
  s.resources.memory_bytes = 256ull << 20;
  s.resources.pids = 64;
  s.init_argv = {"/usr/local/bin/cordon-agent", "--listen", "0.0.0.0:49983"};
  s.env = {{"PATH", "/usr/bin:/bin"}, {"HOME", "/root"}};
  return s;
}

TEST(GvisorSpec, ConfinesTheSandbox) {
  json j = json::parse(gvisor_oci_spec(sample(), "/x/rootfs"));
  EXPECT_EQ(j["root"]["path"], "/x/rootfs");
  EXPECT_EQ(j["root"]["readonly"], false);  // writes go to the private overlay, never the lower
  EXPECT_EQ(j["hostname"], "abcdefghij0123456789");
  EXPECT_EQ(j["process"]["args"][0], "/usr/local/bin/cordon-agent");
  // Only the environment we set: no host variable leaks in.
  EXPECT_EQ(j["process"]["env"].size(), 2u);
  EXPECT_EQ(j["process"]["env"][0], "HOME=/root");
  // The named network namespace, explicitly (runsc's root-netns check is hidden from it).
  bool netns = false;
  for (const auto& n : j["linux"]["namespaces"])
    if (n["type"] == "network") netns = n["path"] == "/run/netns/cdsb-abcdefghij0123456789";
  EXPECT_TRUE(netns);
  // No bind mount of any host path: only kernel file systems.
  for (const auto& m : j["mounts"]) {
    EXPECT_NE(m["type"], "bind") << m.dump();
    EXPECT_TRUE(m["source"] == "proc" || m["source"] == "tmpfs" || m["source"] == "sysfs" ||
                m["source"] == "devpts" || m["source"] == "shm")
        << m.dump();
  }
  EXPECT_EQ(j["linux"]["cgroupsPath"], "/cordon/cdsb-abcdefghij0123456789");
  const auto& r = j["linux"]["resources"];
  EXPECT_EQ(r["memory"]["limit"], 256ull << 20);
  EXPECT_EQ(r["memory"]["swap"], 256ull << 20);  // memory+swap = memory: no swap
  EXPECT_EQ(r["cpu"]["quota"], 50000);
  EXPECT_EQ(r["cpu"]["period"], 100000);
  EXPECT_EQ(r["pids"]["limit"], 64 * kHostTasksPerGuestProcess + kHostTaskOverhead);
  bool nproc = false;
  for (const auto& l : j["process"]["rlimits"])
    if (l["type"] == "RLIMIT_NPROC") nproc = l["hard"] == 64 && l["soft"] == 64;
  EXPECT_TRUE(nproc);
  // No capability beyond the default container set.
  for (const auto& c : j["process"]["capabilities"]["bounding"]) {
    EXPECT_NE(c, "CAP_SYS_ADMIN");
    EXPECT_NE(c, "CAP_NET_ADMIN");
    EXPECT_NE(c, "CAP_NET_RAW");
    EXPECT_NE(c, "CAP_SYS_PTRACE");
  }
}

TEST(GvisorAvailable, SaysWhatIsMissing) {
  auto st = gvisor_available("/nonexistent/runsc");
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("not found"), std::string::npos) << st.error().message;
}

}  // namespace
}  // namespace cordon::sandbox
