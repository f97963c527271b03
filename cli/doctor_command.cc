// `cordon doctor`: what this host offers and what cordon will use: virtualization (and so the
// sandbox backend), traffic steering, the state directory's health, the tools tests rely on.
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "bpf/steering.h"
#include "ca/ca.h"
#include "cli/cli.h"
#include "common/subprocess.h"
#include "sandbox/gvisor/gvisor_backend.h"
#include "sandbox/microvm/microvm_backend.h"
#include "sandbox/steering_service.h"
#include "vault/vault.h"
#include "vmm/host_probe.h"

namespace cordon::cli {
namespace {

bool on_path(const std::string& tool) {
  return !find_on_path(tool).empty();
}

void line(const char* what, const std::string& value, const std::string& detail = {}) {
  std::printf("%-14s %-18s %s\n", what, value.c_str(), detail.c_str());
}

}  // namespace

void add_doctor_command(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand(
      "doctor",
      "report this host's virtualization, steering and state; exit 1 if cordon cannot run");
  on_run(cmd, ctx, [&ctx]() {
    bool ok = true;
    struct utsname u;
    if (::uname(&u) == 0) line("kernel", u.release);

    auto virt = vmm::probe_host();
    std::string backend;
    switch (virt.kind) {
      case vmm::HostVirtKind::kHardwareVmx:
      case vmm::HostVirtKind::kHardwareSvm:
        backend = "microvm";
        break;
      case vmm::HostVirtKind::kPvm:
        backend = "gvisor (microvm needs a PVM-enabled guest kernel here)";
        break;
      case vmm::HostVirtKind::kNone:
        backend = "gvisor";
        break;
    }
    line("virtualization", vmm::to_string(virt.kind), virt.detail);
    // Which sandbox backends can run here, and what --backend auto picks.
    bool gvisor_ok = false;
    if (auto g = sandbox::gvisor_available(); !g) {
      line("gvisor", "unavailable", g.error().message);
    } else if (auto r =
                   run_command({"runsc", "--platform=ptrace", "--network=none", "do", "/bin/true"});
               !r || r->exit_code != 0) {
      line("gvisor", "broken",
           "`runsc --platform=ptrace --network=none do /bin/true` failed" +
               (r ? ": " + r->output.substr(0, 200) : std::string()));
    } else {
      gvisor_ok = true;
      line("gvisor", "ok", "runsc (ptrace platform) runs a sandbox");
    }
    // microvm: hardware KVM (never PVM), the monitor, and the guest kernel + initrd in the state
    // directory (the same check `--backend auto` makes per create).
    auto microvm_options = sandbox::microvm_default_options(ctx.state().root);
    Status microvm_ok = sandbox::microvm_available(microvm_options);
    line("microvm", microvm_ok ? "ok" : "unavailable",
         microvm_ok ? "cordon-vmm " + microvm_options.vmm + ", kernel " + microvm_options.kernel
                    : microvm_ok.error().message);
    std::string auto_pick = microvm_ok ? "microvm" : gvisor_ok ? "gvisor" : "none";
    line("backend auto", auto_pick,
         microvm_ok  ? "hardware virtualization: microVMs"
         : gvisor_ok ? "microvm cannot run here; gvisor"
                     : "no backend can run sandboxes on this host");
    (void)backend;

    auto steering = bpf::steering_mode();
    line("steering", std::string(bpf::mode_name(steering.mode)), steering.detail);
    if (steering.mode == bpf::Mode::kUnavailable) ok = false;

    StateDir state = ctx.state();
    // What a running `cordon serve --steering` of this state directory actually uses.
    if (auto in_use = sandbox::steering_list(state.steering_socket()); in_use) {
      auto j = nlohmann::json::parse(*in_use, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.value("ok", false))
        line("steering use", j.value("mode", std::string("?")),
             "cordon serve confines " + std::to_string(j["interfaces"].size()) + " interface(s)");
    } else {
      line("steering use", "none", "no `cordon serve --steering` on " + state.steering_socket());
    }
    if (auto a = ca::Authority::load(state); a) {
      line("ca", "ok", state.ca_cert());
    } else {
      line("ca", "not ready", a.error().message);
      ok = false;
    }
    if (auto v = vault::Vault::open(state); v) {
      line("vault", "ok", state.vault_db());
    } else {
      line("vault", "not ready", v.error().message);
      ok = false;
    }
    for (const char* tool : {"ip", "nft", "tc", "curl"}) {
      bool found = on_path(tool);
      line(tool, found ? "ok" : "missing");
      if (!found && std::string(tool) != "curl") ok = false;
    }
    return int(ok ? kExitOk : kExitCheckFailed);
  });
}

}  // namespace cordon::cli
