// cordon-vmm: one microVM per process. Boots a kernel (or restores a snapshot), serves the control
// socket, and exits when the guest stops (reset/shutdown) or a "stop" request arrives.
// Exit codes: 0 guest reset/shutdown or stop request, 1 set-up error, 2 guest/KVM error.
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "vmm/control/control.h"
#include "vmm/seccomp.h"
#include "vmm/vmm.h"

namespace {

std::atomic<bool> g_stop{false};

}  // namespace

int main(int argc, char** argv) {
  using namespace cordon::vmm;
  CLI::App app{"cordon-vmm: KVM microVM monitor (one VM per process)"};
  VmConfig cfg;
  std::string restore_dir, api_sock, user, serial = "stdout";
  uint64_t mem_mib = 128;
  bool paused = false, no_acpi = false, no_seccomp = false;
  app.add_option("--kernel", cfg.kernel_path, "bzImage or ELF vmlinux");
  app.add_option("--initrd", cfg.initrd_path, "initramfs");
  app.add_option("--cmdline", cfg.cmdline, "kernel command line");
  app.add_option("--mem-mib", mem_mib, "guest RAM in MiB")->check(CLI::Range(2, 3072));
  app.add_option("--vcpus", cfg.vcpus, "number of vCPUs")->check(CLI::Range(1, 32));
  app.add_flag("--no-acpi", no_acpi, "do not generate ACPI tables");
  app.add_flag("--rng", cfg.rng, "add a virtio-rng device");
  app.add_option("--vsock-uds", cfg.vsock_uds_path,
                 "virtio-vsock with its host side on this Unix socket");
  app.add_option("--cid", cfg.guest_cid, "guest vsock CID (>= 3)");
  app.add_option("--tap", cfg.tap_name, "virtio-net on this TAP device");
  app.add_option("--mac", cfg.mac, "guest MAC address");
  app.add_option("--block", cfg.block_base, "virtio-blk base image (opened read-only)");
  app.add_option("--block-overlay", cfg.block_overlay, "copy-on-write overlay file for the disk");
  app.add_option("--restore", restore_dir,
                 "restore from this snapshot directory instead of booting");
  app.add_option("--api-sock", api_sock, "control socket (JSON lines)");
  app.add_flag("--paused", paused, "wait for a start (or resume after --restore) request");
  app.add_option("--serial", serial, "console output: stdout, none, or a file path");
  app.add_option("--user", user,
                 "drop to this user after opening devices, before any thread starts");
  app.add_flag("--no-seccomp", no_seccomp, "do not install the seccomp filters");
  CLI11_PARSE(app, argc, argv);
  cfg.mem_bytes = mem_mib << 20;
  cfg.acpi = !no_acpi;
  cfg.seccomp = !no_seccomp;
  cfg.run_as_user = user;

  int serial_fd = -1;
  if (serial == "stdout") {
    serial_fd = STDOUT_FILENO;
  } else if (serial != "none") {
    serial_fd = ::open(serial.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (serial_fd < 0) {
      std::cerr << "cordon-vmm: " << serial << ": " << std::strerror(errno) << "\n";
      return 1;
    }
  }
  cfg.serial_fd = serial_fd;

  std::unique_ptr<Machine> m;
  if (!restore_dir.empty()) {
    RestoreOptions o;
    o.serial_fd = serial_fd;
    o.vsock_uds_path = cfg.vsock_uds_path;
    o.tap_name = cfg.tap_name;
    o.block_overlay = cfg.block_overlay;
    o.seccomp = cfg.seccomp;
    o.run_as_user = user;
    auto r = Machine::restore(restore_dir, o);
    if (!r) {
      std::cerr << "cordon-vmm: restore: " << r.error().message << "\n";
      return 1;
    }
    m = std::move(*r);
  } else {
    if (cfg.kernel_path.empty()) {
      std::cerr << "cordon-vmm: --kernel or --restore is required\n";
      return 1;
    }
    auto r = Machine::create(cfg);
    if (!r) {
      std::cerr << "cordon-vmm: " << r.error().message << "\n";
      return 1;
    }
    m = std::move(*r);
  }

  std::unique_ptr<control::ControlServer> server;
  if (!api_sock.empty()) {
    auto s = control::ControlServer::start(
        api_sock, m.get(), [] { g_stop = true; }, cfg.seccomp);
    if (!s) {
      std::cerr << "cordon-vmm: " << s.error().message << "\n";
      return 1;
    }
    server = std::move(*s);
  }
  if (!paused) {
    auto st = restore_dir.empty() ? m->start() : m->resume();
    if (!st) {
      std::cerr << "cordon-vmm: " << st.error().message << "\n";
      return 1;
    }
  }
  while (!g_stop && !m->wait_stopped(std::chrono::milliseconds(50))) {
  }
  MachineStatus s = m->status();
  server.reset();
  m->stop();
  const std::string& why = s.stop_reason;
  if (g_stop || why == "reset" || why == "shutdown" || why == "stopped") return 0;
  std::cerr << "cordon-vmm: guest stopped: " << why << "\n";
  return 2;
}
