// cordon_vmm: a KVM microVM monitor in the Firecracker model, one VM per process (cordon-vmm).
// A Machine owns the KVM VM, guest RAM (memfd, or a snapshot file mapped MAP_PRIVATE), the vCPU
// threads, the legacy devices, the virtio-mmio devices and the event thread that serves their
// host backends. Trusts: the host configuration and snapshot files (they come from cordon itself);
// never the guest: everything the guest writes (registers, rings, packets) is validated.
//
// Entropy on restore (clones must not share RNG state): every boot and every restore puts a new
// 16-byte generation id and a fresh 64-byte seed from the host's getrandom() in the entropy
// mailbox, an MMIO page at 0xC0FFF000 (layout and registers in vmm/snapshot/entropy.h), before
// any vCPU runs. The seed never lives in guest RAM, so no snapshot carries it. What the guest
// agent must do: at start and whenever the generation id differs from the one it last saw (it
// checks first thing after its snapshot request returns), read the seed, ioctl(RNDADDENTROPY)
// it into the kernel (512 bits credited), ioctl(RNDRESEEDCRNG), write 1 to the ACK register
// (the seed then reads as zeros) and only then thaw user code; snapshots are taken only while
// user code is frozen. User-space PRNGs seeded before the snapshot must be told or restarted.
//
// Where set-up and restore time goes on this host (bench/vmm): KVM_SET_USER_MEMORY_REGION and
// KVM_CREATE_IRQCHIP sleep for SRCU grace periods and KVM_CREATE_PIT2 for a kthread, off-CPU
// waits that dominate the wall time; the memslot is registered on a helper thread to overlap them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace cordon::vmm {

struct VmConfig {
  std::string kernel_path;  // bzImage, ELF vmlinux (PVH or 64-bit entry)
  std::string initrd_path;  // optional
  std::string cmdline = "console=ttyS0 reboot=k panic=1 pci=off";
  uint64_t mem_bytes = 128ull << 20;
  int vcpus = 1;
  bool acpi = true;  // RSDP/XSDT/FADT/MADT/DSDT describing CPUs, IOAPIC and virtio-mmio slots

  int serial_fd = -1;           // where guest console output goes (-1: nowhere)
  bool capture_serial = false;  // also keep it in memory (serial_output())

  bool rng = false;            // virtio-rng fed from getrandom()
  std::string vsock_uds_path;  // non-empty: virtio-vsock, host side on this Unix socket
  uint32_t guest_cid = 3;
  std::string tap_name;  // non-empty: virtio-net on this TAP device
  std::string mac = "06:00:ac:10:00:02";
  std::string block_base;     // non-empty: virtio-blk over this raw image (opened read-only)
  std::string block_overlay;  // copy-on-write overlay file for writes (empty: read-only disk)
  bool seccomp = false;       // per-thread seccomp filters (vmm/seccomp.h)
  // Non-empty: switch to this user after /dev/kvm, the TAP and every file are open, before any
  // thread exists (so every thread runs unprivileged).
  std::string run_as_user;
};

enum class MachineState { kCreated, kRunning, kPaused, kStopped };
std::string to_string(MachineState s);

struct MachineStatus {
  MachineState state = MachineState::kCreated;
  std::string stop_reason;    // "reset", "shutdown", "stopped", or an error text
  double setup_ms = 0;        // creation start -> vCPU threads released
  double first_exit_ms = -1;  // creation start -> first VM exit (the guest ran)
  double boot_ms = -1;        // creation start -> boot-timer write (guest said "booted")
  uint64_t exits = 0;
  double exits_per_second = 0;  // over the last status interval
  double uptime_s = 0;
  std::string host_kind;
  uint64_t mem_bytes = 0;
  int vcpus = 0;
};

struct RestoreOptions {
  int serial_fd = -1;
  bool capture_serial = false;
  std::string vsock_uds_path;  // override the snapshot's (each clone needs its own)
  std::string tap_name;        // override
  // Override of the disk's copy-on-write overlay: a copy of the snapshot's (a clone's own disk).
  // Restores never truncate the overlay: its blocks are the ones the snapshot marks written.
  std::string block_overlay;
  bool allow_host_mismatch = false;  // tests only
  bool seccomp = false;
  std::string run_as_user;
};

class Machine {
 public:
  virtual ~Machine() = default;

  static Result<std::unique_ptr<Machine>> create(const VmConfig& config);
  // create() into a machine from prepare() (below) with config's memory size and vCPU count: only
  // the devices, the guest image and the threads remain to be made. `prepared` is consumed.
  static Result<std::unique_ptr<Machine>> create(const VmConfig& config,
                                                 std::unique_ptr<Machine> prepared);
  // Restores from a snapshot directory written by snapshot(): state + memory (mapped MAP_PRIVATE).
  // A new entropy generation and seed are in place before it returns (see above). The machine is
  // left paused; resume() runs it.
  static Result<std::unique_ptr<Machine>> restore(const std::string& snapshot_dir,
                                                  const RestoreOptions& options);
  // A VM made ahead of time for a later restore: KVM VM, irqchip, PIT, vCPUs and a memslot over
  // guest memory of `mem_bytes` (a memfd, untouched until used, so it costs no RAM). A pool of
  // these takes KVM's VM-creation waits (SRCU grace periods, the PIT kthread) off the set-up and
  // restore paths. It cannot run by itself: pass it to create() above or restore() below.
  static Result<std::unique_ptr<Machine>> prepare(uint64_t mem_bytes, int vcpus);
  // restore() into a machine from prepare() with the snapshot's memory size and vCPU count: the
  // snapshot's memory file is mapped over the placeholder (MAP_FIXED, MAP_PRIVATE), then the same
  // steps as above. `prepared` is consumed either way.
  static Result<std::unique_ptr<Machine>> restore(const std::string& snapshot_dir,
                                                  const RestoreOptions& options,
                                                  std::unique_ptr<Machine> prepared);

  virtual Status start() = 0;  // releases the vCPU threads
  virtual Status pause() = 0;  // all vCPUs out of KVM_RUN, device threads quiet
  virtual Status resume() = 0;
  // Pauses if running, writes <dir>/state and <dir>/memory, stays paused.
  virtual Status snapshot(const std::string& dir) = 0;
  virtual void stop() = 0;  // idempotent; joins every thread
  // Waits until the guest stops by itself (reset, shutdown, error) or the timeout passes.
  virtual bool wait_stopped(std::chrono::milliseconds timeout) = 0;
  virtual MachineStatus status() = 0;
  virtual std::string serial_output() = 0;  // captured console output (capture_serial)
  // Bytes for the guest's console input.
  virtual void serial_input(const std::string& bytes) = 0;
};

}  // namespace cordon::vmm
