// The steering owned by `cordon serve` (issue 5): one bpf::Steering (or the nftables TPROXY
// fallback) in serve's network namespace, fed with the gateway's listener sockets, attached to
// sandbox interfaces on request, and a reader of the program's drop events.
//
// How a sandbox interface gets attached when `cordon sandbox netns create` runs in another
// process: serve listens on a control socket (StateDir::steering_socket(), a 0600 Unix socket in
// the 0700 state directory; a peer that is neither root nor serve's uid is dropped) and the CLI
// asks it, one JSON line per connection:
//   {"op": "attach", "sandbox": ID, "interface": IF, "ipv4": A, "ipv6": A6}  -> {"ok": true}
//   {"op": "detach", "interface": IF}                                        -> {"ok": true}
//   {"op": "list"} -> {"ok": true, "mode": "ebpf-sk-assign", "interfaces": [{...}, ...]}
//   {"ok": false, "error": "..."} on failure.
// The CLI attaches before it registers the sandbox with the vault and before anything runs in
// the namespace, and refuses to create a sandbox when serve is not there: nothing ever runs
// behind an interface without the program. (Watching the vault's registrations instead would
// leave a window between registration and the next poll.)
//
// The attachments are written to StateDir::steering_state() (0600) so that a restarted serve
// re-attaches them with its new program and sockets. Interfaces found running a cordon filter
// that the file does not know are re-attached with no allowed source at all (every packet
// refused except ARP/ND): fail closed.
//
// Stopping: leave_attached() keeps the filters in place, so that a stopped serve means "nothing
// passes" (the program drops; its listener slots are empty), not "everything passes".
//
// Owns: the Steering object, the control socket and its thread, the drop-event thread, the
// state file. Trusts: the control socket's peers (root), the listener fds given by serve.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bpf/steering.h"
#include "common/result.h"

namespace cordon::sandbox {

enum class SteeringBackend { kEbpf, kNftables };

struct SteeringServiceOptions {
  SteeringBackend backend = SteeringBackend::kEbpf;
  std::string socket_path;  // control socket
  std::string state_path;   // attachments file
  bpf::SteeringOptions steering;
  // eBPF: the gateway's sockets (-1 = none; that slot then drops as "gateway gone").
  int tcp4_fd = -1, tcp6_fd = -1;
  int dns_udp4_fd = -1, dns_udp6_fd = -1, dns_tcp4_fd = -1, dns_tcp6_fd = -1;
  // nftables: where TPROXY sends (the listeners' ports on 127.0.0.1 / ::1).
  uint16_t http_port = 0, dns_port = 0;
  // egress_dropped lines per interface: burst, then one per interval.
  uint32_t drop_audit_burst = 20;
  uint64_t drop_audit_interval_ms = 1000;
};

struct Attachment {
  std::string sandbox;
  std::string interface;
  std::string ipv4;
  std::string ipv6;
};

// A drop to be audited as `egress_dropped` (already rate-limited).
struct EgressDrop {
  bpf::DropEvent event;
  std::string sandbox;      // from the attachment of the interface; empty if unknown
  uint64_t suppressed = 0;  // drops of this interface not reported since the previous line
};

class SteeringService {
 public:
  static Result<std::unique_ptr<SteeringService>> start(
      const SteeringServiceOptions& options, std::function<void(const EgressDrop&)> on_drop);
  ~SteeringService();  // stops the threads; detaches only if leave_attached() was not called
  SteeringService(const SteeringService&) = delete;
  SteeringService& operator=(const SteeringService&) = delete;

  Status attach(const Attachment& a);
  Status detach(const std::string& interface);
  std::vector<Attachment> attachments() const;
  // Counters of an attached interface (eBPF only).
  Result<bpf::InterfaceCounters> counters(const std::string& interface) const;
  // At shutdown: keep every filter in place (fail closed) and forget them.
  void leave_attached();
  std::string mode_name() const;

  struct Impl;

 private:
  explicit SteeringService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Client side (the CLI). Fails with a clear message when serve is not running.
Status steering_attach(const std::string& socket_path, const Attachment& a);
Status steering_detach(const std::string& socket_path, const std::string& interface);
Result<std::string> steering_list(const std::string& socket_path);  // the raw JSON answer

}  // namespace cordon::sandbox
