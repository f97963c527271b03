// serve-side steering: see steering_service.h for what it owns, trusts and why.
#include "sandbox/steering_service.h"

#include <net/if.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/file_io.h"
#include "common/subprocess.h"
#include "common/unix_socket.h"

namespace cordon::sandbox {

namespace {

using nlohmann::json;

// Bytes of one control request line; requests are a few hundred bytes.
constexpr size_t kMaxRequestBytes = 4096;
// Time a control peer has to send its request.
constexpr int kRequestTimeoutMs = 2000;
// Sources that no packet can have: an interface with this entry refuses all IP traffic.
constexpr const char* kRefuseAllIpv4 = "0.0.0.0";

uint64_t now_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

bool valid_ifname(const std::string& s) {
  if (s.empty() || s.size() >= IF_NAMESIZE) return false;
  for (char c : s)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

json to_json(const Attachment& a) {
  return {{"sandbox", a.sandbox}, {"interface", a.interface}, {"ipv4", a.ipv4}, {"ipv6", a.ipv6}};
}

Attachment from_json(const json& j) {
  Attachment a;
  a.sandbox = j.value("sandbox", "");
  a.interface = j.value("interface", "");
  a.ipv4 = j.value("ipv4", "");
  a.ipv6 = j.value("ipv6", "");
  return a;
}

// One request/response exchange on a connected Unix socket.
Result<std::string> call(const std::string& socket_path, const std::string& request) {
  auto fd = connect_unix(socket_path, std::chrono::seconds(10));
  if (!fd)
    return fail("steering control: " + fd.error().message +
                " (is `cordon serve --steering ebpf|nftables` running with this state directory?)");
  if (!write_all(fd->get(), request + "\n"))
    return fail("steering control " + socket_path + ": send: " + strerror(errno));
  auto out = read_line(fd->get(), 1 << 20, std::chrono::seconds(10), /*eof_ends_line=*/true);
  if (!out) return fail("steering control " + socket_path + ": no answer: " + out.error().message);
  return *out;
}

Status call_ok(const std::string& socket_path, const json& request) {
  auto r = call(socket_path, request.dump());
  if (!r) return fail(r.error());
  json j = json::parse(*r, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail("steering control " + socket_path + ": bad answer");
  if (!j.value("ok", false))
    return fail("steering control: " + j.value("error", std::string("refused")));
  return {};
}

}  // namespace

struct SteeringService::Impl {
  SteeringServiceOptions options;
  std::function<void(const EgressDrop&)> on_drop;
  mutable std::mutex mu;  // guards steering, attachments, limiter, state file
  std::unique_ptr<bpf::Steering> steering;
  std::map<std::string, Attachment> attachments;  // by interface
  bpf::DropEventLimiter limiter{20, 1000};
  int listen_fd = -1;
  int stop_fd = -1;
  std::thread control_thread;
  std::thread drop_thread;
  bool left_attached = false;
  bool state_dirty = false;  // attachments changed without rewriting the state file

  ~Impl() {
    if (listen_fd >= 0) close(listen_fd);
    if (stop_fd >= 0) close(stop_fd);
  }

  Status save_locked(FileSync sync = FileSync::kFsync) {
    state_dirty = false;
    json arr = json::array();
    for (const auto& [name, a] : attachments) arr.push_back(to_json(a));
    return write_file_atomic(options.state_path, arr.dump(2) + "\n", 0600, sync);
  }

  Status apply_nft_locked() {
    bpf::TproxyConfig c;
    for (const auto& [name, a] : attachments) c.interfaces.push_back(name);
    c.http_port = options.http_port;
    c.dns_port = options.dns_port;
    c.mark = options.steering.mark;
    if (c.interfaces.empty()) {
      if (auto st = bpf::remove_nft_tproxy(c.table); !st) return st;
      return bpf::remove_policy_routing(options.steering);
    }
    if (auto st = bpf::install_policy_routing(options.steering); !st) return st;
    return bpf::apply_nft_tproxy(c);
  }

  Status attach_locked(const Attachment& a) {
    if (!valid_ifname(a.interface))
      return fail("steering attach: bad interface '" + a.interface + "'");
    if (options.backend == SteeringBackend::kEbpf) {
      bpf::SourceAddresses src{a.ipv4, a.ipv6};
      if (a.ipv4.empty() && a.ipv6.empty()) src.ipv4 = kRefuseAllIpv4;  // never "no check"
      if (attachments.count(a.interface) && steering->is_attached(a.interface)) {
        // A new identity on an interface that already carries the program (a warm-pool claim:
        // refuse-all sources become the sandbox's address): one map update, and the state file
        // is rewritten later by the drop thread (50 claims at once would otherwise queue behind
        // 50 rewrites). It is then a hint only: a restart before the rewrite re-attaches the
        // previous sources (refuse-all, fail closed), and recovery re-attaches running
        // sandboxes with theirs from the registry.
        if (auto st = steering->set_allowed_sources(a.interface, src); !st) return st;
        attachments[a.interface] = a;
        state_dirty = true;
        return {};
      }
      if (auto st = steering->attach(a.interface, src); !st) return st;
    } else {
      // The fallback has no source check in the program: the kernel's reverse-path filter
      // refuses sources not routed back through the interface.
      (void)run_command({"sysctl", "-qw", "net.ipv4.conf." + a.interface + ".rp_filter=1"});
      attachments[a.interface] = a;
      if (auto st = apply_nft_locked(); !st) {
        attachments.erase(a.interface);
        return st;
      }
    }
    attachments[a.interface] = a;
    return save_locked();
  }

  Status detach_locked(const std::string& ifname) {
    Status result;
    if (options.backend == SteeringBackend::kEbpf) {
      result = steering->detach(ifname);
      attachments.erase(ifname);
    } else {
      attachments.erase(ifname);
      result = apply_nft_locked();
    }
    if (auto st = save_locked(); !st && result) result = st;
    return result;
  }

  std::string handle(const std::string& line) {
    json req = json::parse(line, nullptr, false);
    if (req.is_discarded() || !req.is_object())
      return json{{"ok", false}, {"error", "request is not a JSON object"}}.dump();
    std::string op = req.value("op", "");
    std::lock_guard lk(mu);
    Status st;
    if (op == "attach") {
      if (!req.contains("interface") || !req["interface"].is_string())
        return json{{"ok", false}, {"error", "attach: 'interface' missing"}}.dump();
      st = attach_locked(from_json(req));
    } else if (op == "detach") {
      st = detach_locked(req.value("interface", ""));
    } else if (op == "list") {
      json arr = json::array();
      for (const auto& [name, a] : attachments) {
        json j = to_json(a);
        if (steering) {
          if (auto c = steering->counters(name)) {
            json counters = json::object();
            for (uint32_t i = 0; i < static_cast<uint32_t>(bpf::Counter::kCount); ++i)
              counters[std::string(bpf::counter_name(static_cast<bpf::Counter>(i)))] = c->value[i];
            j["counters"] = counters;
          }
        }
        arr.push_back(j);
      }
      return json{{"ok", true}, {"mode", mode()}, {"interfaces", arr}}.dump();
    } else {
      return json{{"ok", false}, {"error", "unknown op '" + op + "'"}}.dump();
    }
    if (!st) return json{{"ok", false}, {"error", st.error().message}}.dump();
    return json{{"ok", true}}.dump();
  }

  std::string mode() const {
    return options.backend == SteeringBackend::kEbpf ? "ebpf-sk-assign" : "nftables-tproxy";
  }

  void serve_one(int fd) {
    if (!peer_is_root_or_self(fd)) return;
    auto line = read_line(fd, kMaxRequestBytes, std::chrono::milliseconds(kRequestTimeoutMs));
    if (!line) return;
    (void)write_all(fd, handle(*line) + "\n");  // a client that went away misses its answer
  }

  void control_loop() {
    while (true) {
      pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      if (poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[1].revents) return;
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      serve_one(fd);
      close(fd);
    }
  }

  void drop_loop() {
    int events_fd = steering->drop_events_fd();
    std::function<void(const bpf::DropEvent&)> collect;
    while (true) {
      pollfd p[2] = {{events_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      int rc = poll(p, 2, 1000);
      if (rc < 0 && errno != EINTR) return;
      if (p[1].revents) return;
      std::vector<EgressDrop> out;
      {
        std::lock_guard lk(mu);
        uint64_t now = now_ms();
        collect = [&](const bpf::DropEvent& e) {
          uint64_t suppressed = 0;
          if (!limiter.admit(e, now, &suppressed)) return;
          EgressDrop d;
          d.event = e;
          d.suppressed = suppressed;
          if (auto it = attachments.find(e.interface); it != attachments.end())
            d.sandbox = it->second.sandbox;
          out.push_back(std::move(d));
        };
        (void)steering->poll_drop_events(0, collect);
        // A failed rewrite stays dirty and is retried; the next durable save reports errors.
        if (state_dirty && !save_locked(FileSync::kNoFsync)) state_dirty = true;
      }
      if (on_drop)
        for (const auto& d : out) on_drop(d);
    }
  }
};

SteeringService::SteeringService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SteeringService::~SteeringService() {
  if (impl_->stop_fd >= 0) {
    uint64_t one = 1;
    (void)!write(impl_->stop_fd, &one, sizeof one);
  }
  if (impl_->control_thread.joinable()) impl_->control_thread.join();
  if (impl_->drop_thread.joinable()) impl_->drop_thread.join();
  unlink(impl_->options.socket_path.c_str());
  std::lock_guard lk(impl_->mu);
  if (impl_->left_attached) {
    if (impl_->state_dirty) (void)impl_->save_locked();  // the restart's re-attach reads it
    if (impl_->steering) impl_->steering->release();
    return;
  }
  // Not left attached (e.g. start-up failed half way): undo, and forget the state.
  std::vector<std::string> names;
  for (const auto& [name, a] : impl_->attachments) names.push_back(name);
  for (const auto& n : names) (void)impl_->detach_locked(n);
}

Result<std::unique_ptr<SteeringService>> SteeringService::start(
    const SteeringServiceOptions& options, std::function<void(const EgressDrop&)> on_drop) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->on_drop = std::move(on_drop);
  impl->limiter = bpf::DropEventLimiter(options.drop_audit_burst, options.drop_audit_interval_ms);
  if (options.socket_path.empty() || options.state_path.empty())
    return fail("steering: socket_path and state_path are needed");

  if (options.backend == SteeringBackend::kEbpf) {
    auto s = bpf::Steering::create(options.steering);
    if (!s) return fail(s.error());
    impl->steering = std::move(*s);
    std::pair<bpf::ListenerSlot, int> slots[] = {
        {bpf::ListenerSlot::kTcp4, options.tcp4_fd},
        {bpf::ListenerSlot::kTcp6, options.tcp6_fd},
        {bpf::ListenerSlot::kDnsUdp4, options.dns_udp4_fd},
        {bpf::ListenerSlot::kDnsUdp6, options.dns_udp6_fd},
        {bpf::ListenerSlot::kDnsTcp4, options.dns_tcp4_fd},
        {bpf::ListenerSlot::kDnsTcp6, options.dns_tcp6_fd},
    };
    for (auto [slot, fd] : slots)
      if (fd >= 0)
        if (auto st = impl->steering->set_listener(slot, fd); !st)
          return with_context("steering: the gateway's sockets", st.error());
  } else if (options.http_port == 0 || options.dns_port == 0) {
    return fail("steering (nftables): the transparent and DNS ports are needed");
  }

  // Re-attach what a previous serve left (its filters kept enforcing meanwhile).
  std::vector<Attachment> previous;
  if (auto text = read_private_file(options.state_path)) {
    json arr = json::parse(*text, nullptr, false);
    if (arr.is_array())
      for (const auto& j : arr)
        if (j.is_object()) previous.push_back(from_json(j));
  }
  {
    std::lock_guard lk(impl->mu);
    std::string errors;
    for (const auto& a : previous) {
      if (if_nametoindex(a.interface.c_str()) == 0) continue;  // the sandbox is gone
      if (auto st = impl->attach_locked(a); !st) errors += " " + st.error().message + ";";
    }
    if (options.backend == SteeringBackend::kEbpf) {
      for (const auto& name : bpf::interfaces_with_cordon_filter()) {
        if (impl->attachments.count(name)) continue;
        if (auto st = impl->attach_locked(Attachment{"", name, "", ""}); !st)
          errors += " " + st.error().message + ";";
      }
    }
    // nftables: one table for all interfaces; rewrite it even when none came back, so that a
    // table naming interfaces deleted while serve was stopped does not linger.
    if (options.backend == SteeringBackend::kNftables)
      if (auto st = impl->apply_nft_locked(); !st) errors += " " + st.error().message + ";";
    if (auto st = impl->save_locked(); !st) return with_context("steering state", st.error());
    if (!errors.empty()) return fail("steering: re-attaching previous interfaces:" + errors);
  }

  auto listener = listen_unix(options.socket_path, 16);
  if (!listener) return with_context("steering control", listener.error());
  impl->listen_fd = listener->release();
  impl->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (impl->stop_fd < 0) return fail(std::string("steering: eventfd: ") + strerror(errno));
  Impl* raw = impl.get();
  impl->control_thread = std::thread([raw] { raw->control_loop(); });
  if (impl->steering) impl->drop_thread = std::thread([raw] { raw->drop_loop(); });
  return std::unique_ptr<SteeringService>(new SteeringService(std::move(impl)));
}

Status SteeringService::attach(const Attachment& a) {
  std::lock_guard lk(impl_->mu);
  return impl_->attach_locked(a);
}

Status SteeringService::detach(const std::string& interface) {
  std::lock_guard lk(impl_->mu);
  return impl_->detach_locked(interface);
}

std::vector<Attachment> SteeringService::attachments() const {
  std::lock_guard lk(impl_->mu);
  std::vector<Attachment> out;
  for (const auto& [n, a] : impl_->attachments) out.push_back(a);
  return out;
}

Result<bpf::InterfaceCounters> SteeringService::counters(const std::string& interface) const {
  std::lock_guard lk(impl_->mu);
  if (!impl_->steering) return fail("steering counters: the nftables fallback has none");
  return impl_->steering->counters(interface);
}

void SteeringService::leave_attached() {
  std::lock_guard lk(impl_->mu);
  impl_->left_attached = true;
}

std::string SteeringService::mode_name() const {
  return impl_->mode();
}

Status steering_attach(const std::string& socket_path, const Attachment& a) {
  json req = to_json(a);
  req["op"] = "attach";
  return call_ok(socket_path, req);
}

Status steering_detach(const std::string& socket_path, const std::string& interface) {
  return call_ok(socket_path, json{{"op", "detach"}, {"interface", interface}});
}

Result<std::string> steering_list(const std::string& socket_path) {
  return call(socket_path, json{{"op", "list"}}.dump());
}

}  // namespace cordon::sandbox
