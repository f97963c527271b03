// The microVM backend (design.md §7): each sandbox is one cordon-vmm process running an
// unmodified Linux guest whose root is the template's ext4 image, inside the sandbox's network
// namespace.
//
// Templates are booted once and snapshotted: the first start from a template (per image, kernel,
// initrd and memory size) boots a template VM, waits for the guest init's control port, takes a
// snapshot and stops it. Every start then restores a clone of that snapshot: guest memory is the
// snapshot's memory file mapped MAP_PRIVATE by the monitor, so clean pages stay shared between
// clones in the page cache. Before start() returns, the backend sends the guest init a SETUP
// line over vsock; the init first checks the monitor's entropy mailbox and reseeds the guest
// kernel (vmm/snapshot/entropy.h) for the clone's new generation, then gives eth0 the sandbox's
// address. The manager reaches the agent only after start() returns, over vsock only (the agent
// runs with --vsock, no TCP listener), so no request is served on the template's CRNG state.
// pause = snapshot to <dir>/pause and stop the monitor; resume = restore from it.
//
// Disk: the template image is the read-only base of virtio-blk; each sandbox has its own
// copy-on-write overlay (cordon-vmm's sparse overlay file + dirty-block bitmap kept in the
// snapshot, no qcow). A clone's overlay starts as a copy of the template VM's: a reflink
// (FICLONE) where the file system can, else a sparse copy of the data extents only.
// Its capacity is the template image's size (resources.disk_bytes does not resize it).
//
// Network: inside the sandbox's namespace the backend makes a bridge br0 holding the namespace's
// veth end (eth0) and a TAP tap0 (the same name in every namespace, so snapshots restore
// anywhere: Firecracker's recipe). The guest's eth0 takes the sandbox's address, so its packets
// leave through the veth whose host side carries the steering program, exactly like a gVisor
// sandbox's; the monitor itself has no other network.
//
// Per sandbox, under BackendSandbox::dir:
//   microvm.json  what the backend needs again: template snapshot, image, pid, paused or not
//   disk.overlay  the copy-on-write overlay     vsock.sock  the vsock muxer (agent: port 49983)
//   api.sock      the monitor's control socket  vmm.log, console.log  its stderr and the serial
//   pause-<n>/    the snapshot of a paused sandbox (state + memory), n counting its pauses
// Limits: the monitor runs in the sandbox's cgroup (memory.max = guest RAM + kVmmOverheadBytes,
// cpu.max from cpu_millis, pids.max); processes inside are bounded by the guest kernel.
//
// Owns: the monitors it started, the files above, the bridge and TAP, the cgroup, the template
// snapshots under MicrovmOptions::cache_dir. Trusts: the manager for ids, paths and the netns;
// the template image, kernel and initrd; snapshot files (written by cordon itself).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sandbox/manager/backend.h"

namespace cordon::sandbox {

inline constexpr uint32_t kMicrovmAgentPort = 49983;  // the agent: cordon-agent --vsock 49983
inline constexpr uint32_t kMicrovmInitPort = 49990;   // the guest init's SETUP/PING port
inline constexpr uint64_t kVmmOverheadBytes = 64ull << 20;

struct MicrovmOptions {
  std::string vmm = "cordon-vmm";  // path, or a name looked up in PATH
  std::string kernel;              // guest bzImage (Debian's linux-image-cloud-amd64)
  // Guest initramfs: microvm_init as /init and the virtio modules of `kernel` (make_initrd.sh).
  std::string initrd;
  std::string cache_dir;  // template snapshots, one directory per template key
  std::string cmdline =
      "console=ttyS0 quiet reboot=k panic=-1 pci=off initcall_blacklist=cmos_init i8042.noaux "
      "i8042.nomux i8042.dumbkbd";
  bool seccomp = true;
  int boot_timeout_ms = 180000;  // template boot -> init answers
  int op_timeout_ms = 120000;    // one snapshot / restore / SETUP
};

// Defaults under a state directory: <root>/microvm/{vmlinuz,initrd.cpio,cache}, cordon-vmm
// beside the running executable if it is there, else from PATH.
MicrovmOptions microvm_default_options(const std::string& state_root);

// Whether this host can run the backend: hardware virtualization (VMX/SVM KVM; KVM-PVM cannot
// boot an unmodified kernel), the monitor, kernel and initrd present; the message says what is
// missing.
Status microvm_available(const MicrovmOptions& options);

std::unique_ptr<Backend> make_microvm_backend(const MicrovmOptions& options);

// The vsock muxer socket of a sandbox (the manager's agent client connects here).
std::string microvm_vsock_path(const std::string& sandbox_dir);

// --- exposed for tests ---------------------------------------------------------------------

// The template snapshot key: a hash of image (path, size, mtime), kernel, initrd, memory size.
Result<std::string> microvm_template_key(const MicrovmOptions& o, const std::string& image,
                                         uint64_t mem_mib);
// Guest memory for a sandbox's resources: memory_bytes in MiB, at least 128.
uint64_t microvm_mem_mib(const Resources& r);
// cordon-vmm's argv for the template boot and for a restore.
std::vector<std::string> microvm_boot_argv(const MicrovmOptions& o, const std::string& image,
                                           const std::string& template_dir, uint64_t mem_mib);
std::vector<std::string> microvm_restore_argv(const MicrovmOptions& o,
                                              const std::string& snapshot_dir,
                                              const std::string& sandbox_dir);
// The SETUP line the guest init applies after every restore.
std::string microvm_setup_line(const BackendSandbox& s);
// Copies `from` to a new file `to` (0600): FICLONE, else only the data extents (SEEK_DATA /
// SEEK_HOLE), leaving holes as holes. Returns "reflink" or "sparse".
Result<std::string> copy_file_cow(const std::string& from, const std::string& to);

}  // namespace cordon::sandbox
