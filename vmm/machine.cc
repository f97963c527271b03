// Machine (vmm.h): how create, restore and prepare order their steps. The machine itself is
// vmm/detail/machine_impl.h, its set-up, running and snapshots in the units beside it.
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "vmm/detail/machine_impl.h"
#include "vmm/kvm/guest_memory.h"
#include "vmm/vmm.h"

namespace cordon::vmm {

using detail::install_kick_handler;
using detail::load_state;
using detail::MachineImpl;

std::string to_string(MachineState s) {
  switch (s) {
    case MachineState::kCreated:
      return "created";
    case MachineState::kRunning:
      return "running";
    case MachineState::kPaused:
      return "paused";
    default:
      return "stopped";
  }
}

namespace {

// Drops to `user` (groups, gid, uid in that order). Called before the machine's threads exist:
// glibc's setuid broadcasts to every thread, which the seccomp filters would refuse.
Status drop_privileges(const std::string& user) {
  passwd* pw = ::getpwnam(user.c_str());
  if (pw == nullptr) return fail("unknown user " + user);
  if (::setgroups(0, nullptr) != 0 || ::setgid(pw->pw_gid) != 0 || ::setuid(pw->pw_uid) != 0)
    return fail("cannot switch to user " + user + ": " + std::strerror(errno));
  return {};
}

// The steps after the VM exists: devices and state, entropy, user switch, threads; left paused.
Result<std::unique_ptr<Machine>> finish_restore(std::unique_ptr<MachineImpl> m,
                                                const std::string& dir, const std::string& body,
                                                const RestoreOptions& opts) {
  if (auto st = m->restore_state(body, opts); !st) return fail(with_context(dir, st.error()).error);
  if (auto st = m->join_memslot(); !st) return fail(st.error());
  if (!opts.run_as_user.empty()) {
    if (auto st = drop_privileges(opts.run_as_user); !st) return fail(st.error());
  }
  if (auto st = m->spawn_threads(); !st) return fail(st.error());
  if (auto st = m->pause(); !st) return fail(st.error());  // runs on resume()
  if (auto st = m->start(); !st) return fail(st.error());
  return std::unique_ptr<Machine>(std::move(m));
}

}  // namespace

Result<std::unique_ptr<Machine>> Machine::create(const VmConfig& config) {
  install_kick_handler();  // here, not on a (filtered) thread that calls start()
  auto m = std::make_unique<MachineImpl>();
  m->config_ = config;
  m->serial_fd_ = config.serial_fd;
  m->capture_ = config.capture_serial;
  m->seccomp_ = config.seccomp;
  auto mem = GuestMemory::create_memfd(config.mem_bytes);
  if (!mem) return fail(mem.error());
  if (auto st = m->init_kvm(config.mem_bytes, config.vcpus, std::move(*mem)); !st)
    return fail(st.error());
  if (auto st = m->init_devices(config, config.vsock_uds_path, config.tap_name); !st)
    return fail(st.error());
  if (auto st = m->boot_setup(config); !st) return fail(st.error());
  if (auto st = m->join_memslot(); !st) return fail(st.error());
  if (!config.run_as_user.empty()) {
    m->probe_host_kind();  // needs /dev/kvm access: probe while still privileged
    if (auto st = drop_privileges(config.run_as_user); !st) return fail(st.error());
  }
  if (auto st = m->spawn_threads(); !st) return fail(st.error());
  return std::unique_ptr<Machine>(std::move(m));
}

Result<std::unique_ptr<Machine>> Machine::create(const VmConfig& config,
                                                 std::unique_ptr<Machine> prepared) {
  auto* raw = dynamic_cast<MachineImpl*>(prepared.get());
  if (raw == nullptr || !raw->prepared_) return fail("create: not a machine from prepare()");
  std::unique_ptr<MachineImpl> m(static_cast<MachineImpl*>(prepared.release()));
  if (config.mem_bytes != m->guest_memory_bytes() ||
      static_cast<uint32_t>(config.vcpus) != m->vcpu_count())
    return fail("create: the config asks for " + std::to_string(config.mem_bytes >> 20) +
                " MiB and " + std::to_string(config.vcpus) + " vCPUs, the prepared machine has " +
                std::to_string(m->guest_memory_bytes() >> 20) + " MiB and " +
                std::to_string(m->vcpu_count()));
  m->t0_ = std::chrono::steady_clock::now();  // set-up is timed from this request
  m->prepared_ = false;
  m->config_ = config;
  m->serial_fd_ = config.serial_fd;
  m->capture_ = config.capture_serial;
  m->seccomp_ = config.seccomp;
  if (auto st = m->init_devices(config, config.vsock_uds_path, config.tap_name); !st)
    return fail(st.error());
  if (auto st = m->boot_setup(config); !st) return fail(st.error());
  if (!config.run_as_user.empty()) {
    m->probe_host_kind();
    if (auto st = drop_privileges(config.run_as_user); !st) return fail(st.error());
  }
  if (auto st = m->spawn_threads(); !st) return fail(st.error());
  return std::unique_ptr<Machine>(std::move(m));
}

Result<std::unique_ptr<Machine>> Machine::restore(const std::string& dir,
                                                  const RestoreOptions& opts) {
  install_kick_handler();
  auto m = std::make_unique<MachineImpl>();
  auto loaded = load_state(dir);
  if (!loaded) return fail(loaded.error());
  const uint64_t mem_bytes = loaded->mem_bytes;
  const uint32_t vcpus = loaded->vcpus;
  m->serial_fd_ = opts.serial_fd;
  m->capture_ = opts.capture_serial;
  m->seccomp_ = opts.seccomp;
  m->restored_from_ = dir;
  auto mem = GuestMemory::map_file_private(dir + "/memory", mem_bytes);
  if (!mem) return fail(mem.error());
  if (auto st = m->init_kvm(mem_bytes, static_cast<int>(vcpus), std::move(*mem)); !st)
    return fail(st.error());
  return finish_restore(std::move(m), dir, loaded->body, opts);
}

Result<std::unique_ptr<Machine>> Machine::prepare(uint64_t mem_bytes, int vcpus) {
  install_kick_handler();
  auto m = std::make_unique<MachineImpl>();
  m->prepared_ = true;
  // A memfd that is never written: the snapshot's file replaces the mapping before any use.
  auto mem = GuestMemory::create_memfd(mem_bytes);
  if (!mem) return fail(mem.error());
  if (auto st = m->init_kvm(mem_bytes, vcpus, std::move(*mem)); !st) return fail(st.error());
  if (auto st = m->join_memslot(); !st) return fail(st.error());
  return std::unique_ptr<Machine>(std::move(m));
}

Result<std::unique_ptr<Machine>> Machine::restore(const std::string& dir,
                                                  const RestoreOptions& opts,
                                                  std::unique_ptr<Machine> prepared) {
  auto* raw = dynamic_cast<MachineImpl*>(prepared.get());
  if (raw == nullptr || !raw->prepared_) return fail("restore: not a machine from prepare()");
  std::unique_ptr<MachineImpl> m(static_cast<MachineImpl*>(prepared.release()));
  auto loaded = load_state(dir);
  if (!loaded) return fail(loaded.error());
  if (loaded->mem_bytes != m->guest_memory_bytes() || loaded->vcpus != m->vcpu_count())
    return fail(dir + ": snapshot has " + std::to_string(loaded->mem_bytes >> 20) + " MiB and " +
                std::to_string(loaded->vcpus) + " vCPUs, the prepared machine " +
                std::to_string(m->guest_memory_bytes() >> 20) + " MiB and " +
                std::to_string(m->vcpu_count()));
  if (auto st = m->map_snapshot_memory(dir + "/memory"); !st) return fail(st.error());
  m->t0_ = std::chrono::steady_clock::now();
  m->prepared_ = false;
  m->serial_fd_ = opts.serial_fd;
  m->capture_ = opts.capture_serial;
  m->seccomp_ = opts.seccomp;
  m->restored_from_ = dir;
  return finish_restore(std::move(m), dir, loaded->body, opts);
}

}  // namespace cordon::vmm
