#include "server/server.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "audit/writer.h"
#include "bpf/steering.h"
#include "ca/ca.h"
#include "ca/leaf_cache.h"
#include "common/host_name.h"
#include "gateway/adapters/adapters.h"
#include "gateway/adapters/dns_policy_adapter.h"
#include "gateway/adapters/settings_adapter.h"
#include "gateway/dns_responder.h"
#include "gateway/gateway.h"
#include "policy/policy_store.h"
#include "sandbox/steering_service.h"
#include "server/sandboxes.h"
#include "vault/admin.h"
#include "vault/vault.h"

namespace cordon::server {

namespace {

constexpr int kRulesInvalid = 1;
constexpr int kUsage = 2;

RunOutcome failed(const std::string& message, int code = 3) {
  return RunOutcome{code, message};
}
RunOutcome failed(const Error& e, int code = 3) {
  return RunOutcome{code, e.message};
}

// `egress_dropped`: one line per (rate-limited) packet the steering program shot.
void audit_drop(audit::Writer& w, const sandbox::EgressDrop& d) {
  // Link-local chatter (IPv6 multicast listener reports and the like to ff02::/16) cannot leave
  // the link anyway: counted by the program, not worth an audit line each.
  if (d.event.dst_address.rfind("ff02:", 0) == 0) return;
  audit::Event e;
  e.event = "egress_dropped";
  e.decision = "deny";
  e.reason = std::string(bpf::counter_name(d.event.reason));
  e.sandbox = d.sandbox;
  e.rule = "steering";
  if (!d.event.protocol.empty()) e.add("protocol", d.event.protocol);
  if (!d.event.dst_address.empty()) {
    bool v6 = d.event.dst_address.find(':') != std::string::npos;
    e.add("dst", (v6 ? "[" + d.event.dst_address + "]" : d.event.dst_address) +
                     (d.event.dst_port ? ":" + std::to_string(d.event.dst_port) : ""));
  }
  if (d.event.dst_port) e.add("port", static_cast<int64_t>(d.event.dst_port));
  if (!d.event.src_address.empty()) e.add("src", d.event.src_address);
  if (!d.event.interface.empty()) e.add("interface", d.event.interface);
  if (d.suppressed) e.add("suppressed", static_cast<int64_t>(d.suppressed));
  (void)w.append(e);
}

// The whole configuration of one rules-file snapshot: the gateway's view of it, the DNS
// responder's, and the reloadable options, published to both in one swap.
gateway::GatewayConfig config_of(const std::shared_ptr<const policy::Policy>& snap,
                                 const gateway::GatewayOptions& defaults) {
  namespace adapters = gateway::adapters;
  return gateway::GatewayConfig{adapters::make_policy_view(snap), adapters::make_dns_policy(snap),
                                adapters::runtime_options(snap->gateway_settings(), defaults),
                                snap->generation()};
}

// Whether capability number `cap` is in this process's effective set (/proc/self/status).
bool has_capability(int cap) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return false;
  char line[256];
  unsigned long long eff = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "CapEff: %llx", &eff) == 1) break;
  }
  std::fclose(f);
  return (eff >> cap) & 1ULL;
}

bool ipv6_available() {
  struct stat st {};
  return ::stat("/proc/sys/net/ipv6", &st) == 0;
}

struct FileStamp {
  ino_t ino = 0;
  off_t size = 0;
  timespec mtime{};
  bool operator!=(const FileStamp& o) const {
    return ino != o.ino || size != o.size || mtime.tv_sec != o.mtime.tv_sec ||
           mtime.tv_nsec != o.mtime.tv_nsec;
  }
};

FileStamp stamp(const std::string& path) {
  struct stat st {};
  FileStamp s;
  if (::stat(path.c_str(), &st) == 0) {
    s.ino = st.st_ino;
    s.size = st.st_size;
    s.mtime = st.st_mtim;
  }
  return s;
}

// `restart_required`: gateway settings the reload changed that apply only at the next start.
void audit_reload(audit::Writer& w, bool ok, const std::string& rules, uint64_t generation,
                  const std::string& errors, const std::string& restart_required = {}) {
  audit::Event e;
  e.event = "policy_reload";
  e.decision = ok ? "allow" : "deny";
  e.reason = ok ? "reloaded" : "rules_invalid";
  e.add("file", rules);
  e.add("generation", static_cast<int64_t>(generation));
  if (!ok) e.add("errors", errors.substr(0, 2000));
  if (!restart_required.empty()) e.add("restart_required", restart_required);
  (void)w.append(e);  // a failing writer also makes the gateway deny requests
}

}  // namespace

Server::Server(ServerOptions options) : options_(std::move(options)) {}
Server::~Server() = default;

RunOutcome Server::run(std::FILE* log) {
  const ServerOptions& f = options_;
  using namespace cordon::gateway;
  if (f.proxy_listen.empty() && f.transparent_listen.empty()) {
    return failed("serve: give --proxy-listen and/or --transparent-listen", kUsage);
  }
  std::string steering_mode = f.steering.empty() ? "none" : f.steering;
  if (f.steering.empty())
    std::fprintf(log,
                 "cordon: steering off (no --steering given): sandbox interfaces are not "
                 "confined by this serve; give --steering ebpf|nftables|auto, or --steering none "
                 "to say so\n");
  if (steering_mode.empty()) {
    // The default: confine when this process can (CAP_NET_ADMIN, CAP_BPF or CAP_SYS_ADMIN, a
    // transparent listener, a kernel where a steering works); otherwise serve without and say
    // so once, so that `cordon sandbox netns create` failing later is not a surprise.
    std::string why;
    if (f.transparent_listen.empty()) {
      why = "no --transparent-listen";
    } else if (!has_capability(12) || !(has_capability(39) || has_capability(21))) {
      why = "needs CAP_NET_ADMIN and CAP_BPF or CAP_SYS_ADMIN";
    } else {
      auto m = bpf::steering_mode();
      if (m.mode == bpf::Mode::kUnavailable) why = m.detail;
    }
    steering_mode = why.empty() ? "auto" : "none";
    if (!why.empty())
      std::fprintf(log,
                   "cordon: steering off (%s): sandbox interfaces cannot be confined and "
                   "`cordon sandbox netns create` will fail; see --steering (--steering none "
                   "silences this)\n",
                   why.c_str());
  }
  if (steering_mode == "auto") {
    auto m = bpf::steering_mode();
    steering_mode = m.mode == bpf::Mode::kSkAssign         ? "ebpf"
                    : m.mode == bpf::Mode::kNftablesTproxy ? "nftables"
                                                           : "unavailable";
    if (steering_mode == "unavailable")
      return failed("serve: --steering auto: no steering works here: " + m.detail);
  }
  if (steering_mode != "none" && steering_mode != "ebpf" && steering_mode != "nftables")
    return failed("--steering '" + f.steering + "': expected none, ebpf, nftables or auto", kUsage);
  if (steering_mode != "none" && f.transparent_listen.empty())
    return failed("serve: --steering needs --transparent-listen", kUsage);
  GatewayOptions opts;
  for (const auto& r : f.resolve) {
    size_t eq = r.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == r.size()) {
      return failed("--resolve '" + r + "': expected HOST=IP", kUsage);
    }
    // Looked up by the canonical name the gateway connects to: the one host-name grammar.
    auto host = canonical_host_name(std::string_view(r).substr(0, eq));
    if (!host) return failed("--resolve '" + r + "': host " + host.error().message, kUsage);
    opts.resolve[*host] = r.substr(eq + 1);
  }
  opts.upstream_ca_files = f.upstream_ca;
  opts.dns_server = f.dns_server;  // checked by Gateway::create (IP[:PORT])
  opts.system_trust_store = !f.no_system_trust;
  opts.threads = f.threads;

  const StateDir& state = f.state;

  // Everything loads before anything listens (fail closed).
  auto store = std::make_shared<policy::PolicyStore>();
  policy::LoadOutcome loaded = store->load_file(f.rules);
  if (!loaded.replaced) {
    std::fprintf(log, "%s", loaded.errors_text().c_str());
    return failed("serve: rules file " + f.rules + " is not valid", kRulesInvalid);
  }
  // The rules file's `gateway:` section on top of the defaults and flags. `defaults` stays for
  // reloads (a setting removed from the file returns to its default); `started` is what the
  // restart-only settings are until the next start.
  const GatewayOptions defaults = opts;
  const policy::GatewaySettings started = store->snapshot()->gateway_settings();
  opts = adapters::apply_gateway_settings(started, defaults);
  auto vault = vault::Vault::open(state);
  if (!vault) return failed(with_context("serve: opening the vault", vault.error()).error);
  std::shared_ptr<vault::Vault> vault_shared(std::move(*vault));
  auto authority = ca::Authority::load(state);
  if (!authority) return failed(with_context("serve: loading the CA", authority.error()).error);
  ca::LeafCacheOptions cache_opts;
  cache_opts.mints_per_second = opts.limits.max_mints_per_second;
  cache_opts.mint_burst = opts.limits.max_mints_per_second;
  auto leaves = std::make_shared<ca::LeafCertCache>(*authority, cache_opts);
  audit::WriterOptions wopts;
  wopts.dir = state.audit_dir();
  wopts.retention = adapters::apply_retention(started, wopts.retention);
  auto writer = audit::Writer::open(wopts);
  if (!writer) return failed(with_context("serve: opening the audit log", writer.error()).error);
  std::shared_ptr<audit::Writer> audit_writer(std::move(*writer));

  GatewayPorts ports;
  ports.certs = adapters::make_cert_provider(leaves);
  auto overlays = std::make_shared<adapters::SandboxOverlays>();
  ports.sandboxes = adapters::make_sandbox_directory(vault_shared, overlays);
  ports.credentials = adapters::make_credential_source(vault_shared);
  ports.audit = adapters::make_audit_sink(audit_writer);
  auto gw = Gateway::create(opts, ports);
  if (!gw) return failed(gw.error());
  Gateway& gateway = **gw;
  gateway.set_config(config_of(store->snapshot(), defaults));
  // A narrowed overlay (PUT /sandboxes/{id}/network) also ends the open connections it refuses.
  overlays->on_change([&gateway](const std::string& id) { gateway.end_refused_connections(id); });

  if (!f.proxy_listen.empty()) {
    auto p = gateway.listen_proxy(f.proxy_listen);
    if (!p) return failed(p.error());
    std::fprintf(log, "cordon: explicit proxy listening on %s (port %u)\n", f.proxy_listen.c_str(),
                 static_cast<unsigned>(*p));
  }
  if (!f.transparent_listen.empty()) {
    auto p = gateway.listen_transparent(f.transparent_listen);
    if (!p) return failed(p.error());
    std::fprintf(log, "cordon: transparent listener on %s (port %u)\n",
                 f.transparent_listen.c_str(), static_cast<unsigned>(*p));
  }
  // eBPF steering hands IPv6 sandboxes' connections to an IPv6 listener of its own.
  if (steering_mode == "ebpf" && ipv6_available()) {
    bool have_v6 = false;
    for (auto [fd, v6] : gateway.transparent_listener_fds()) have_v6 |= v6;
    if (!have_v6) {
      auto p = gateway.listen_transparent("[::1]:0");
      if (!p) return failed(p.error());
    }
  }

  // The DNS responder (issue 5): on its own io thread, so that a flood of HTTP cannot starve
  // name resolution and the other way round.
  std::vector<std::string> dns_listen = f.dns_listen;
  if (dns_listen.empty() && steering_mode != "none") {
    dns_listen.push_back(steering_mode == "ebpf" ? "127.0.0.1:0" : "127.0.0.1:15053");
    if (ipv6_available()) dns_listen.push_back(steering_mode == "ebpf" ? "[::1]:0" : "[::1]:15053");
  }
  auto dns_io = std::make_shared<boost::asio::io_context>(1);
  std::unique_ptr<DnsResponder> dns;
  uint16_t dns_port = 0;
  if (!dns_listen.empty()) {
    DnsResponderOptions dopts;
    dopts.synthetic_ipv4 = f.dns_synthetic_ipv4;
    dopts.queries_per_second = f.dns_queries_per_second;
    dopts.query_burst = f.dns_query_burst;
    // The gateway's configuration source: reloads reach both at once.
    auto d =
        DnsResponder::create(*dns_io, dopts, ports.sandboxes, ports.audit, gateway.config_source());
    if (!d) return failed(d.error());
    dns = std::move(*d);
    for (const auto& addr : dns_listen) {
      // nftables TPROXY needs one port for all families: reuse the first one bound.
      std::string a = addr;
      if (steering_mode == "nftables" && dns_port && a.size() > 2 && a.substr(a.size() - 2) == ":0")
        a = a.substr(0, a.size() - 1) + std::to_string(dns_port);
      auto p = dns->listen(a, steering_mode != "none");
      if (!p) return failed(p.error());
      if (!dns_port) dns_port = *p;
      std::fprintf(log, "cordon: DNS responder on %s (port %u, udp+tcp)\n", addr.c_str(),
                   static_cast<unsigned>(*p));
    }
  }

  if (!f.admin_listen.empty()) {
    auto a = gateway.listen_admin(f.admin_listen);
    if (!a) return failed(a.error());
    std::fprintf(log, "cordon: admin listening on %s\n", a->c_str());
  }

  // Signals are handled on this thread only: block them before the io threads start.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  // The vault's admin surface (tokens, sandbox registrations) on a root-only 0600 Unix socket in
  // the state directory, never on an address a sandbox could reach. Started after the signal
  // mask so that its thread never takes SIGTERM.
  vault::AdminApi admin_api(*vault_shared);
  auto admin_server = vault::AdminServer::start(state.admin_socket(), admin_api);
  if (!admin_server)
    return failed(with_context("serve: the admin socket", admin_server.error()).error);
  std::fprintf(log, "cordon: vault admin API on unix:%s\n", state.admin_socket().c_str());

  // Steering: the program (or the nftables fallback) in this namespace, fed with the sockets
  // above; sandbox interfaces are attached through the steering control socket.
  std::unique_ptr<sandbox::SteeringService> steering;
  if (steering_mode != "none") {
    sandbox::SteeringServiceOptions sopts;
    sopts.backend = steering_mode == "ebpf" ? sandbox::SteeringBackend::kEbpf
                                            : sandbox::SteeringBackend::kNftables;
    sopts.socket_path = state.steering_socket();
    sopts.state_path = state.steering_state();
    for (auto [fd, v6] : gateway.transparent_listener_fds()) {
      (v6 ? sopts.tcp6_fd : sopts.tcp4_fd) = fd;
      if (!v6 && !sopts.http_port) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
          sopts.http_port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      }
    }
    if (dns) {
      for (const auto& s : dns->socket_fds()) {
        (s.ipv6 ? sopts.dns_udp6_fd : sopts.dns_udp4_fd) = s.udp;
        (s.ipv6 ? sopts.dns_tcp6_fd : sopts.dns_tcp4_fd) = s.tcp;
      }
    }
    sopts.dns_port = dns_port;
    std::shared_ptr<audit::Writer> drop_writer = audit_writer;
    auto s = sandbox::SteeringService::start(
        sopts, [drop_writer](const sandbox::EgressDrop& d) { audit_drop(*drop_writer, d); });
    if (!s) return failed(with_context("serve: steering", s.error()).error);
    steering = std::move(*s);
    std::fprintf(log, "cordon: steering %s; control on unix:%s (%zu interfaces re-attached)\n",
                 steering->mode_name().c_str(), state.steering_socket().c_str(),
                 steering->attachments().size());
  }
  // Sandboxes (9) and the E2B API (10).
  auto sandboxes = start_sandboxes(f, state, steering.get(), vault_shared, overlays, log);
  if (!sandboxes) return failed(sandboxes.error());
  std::thread dns_thread;
  if (dns) {
    dns->start();
    dns_thread = std::thread([dns_io] {
      auto guard = boost::asio::make_work_guard(*dns_io);
      dns_io->run();
    });
  }
  gateway.start();
  audit_reload(*audit_writer, true, f.rules, loaded.generation, "");

  FileStamp last = stamp(f.rules);
  while (true) {
    timespec tick{1, 0};
    int sig = sigtimedwait(&set, nullptr, &tick);
    bool reload = sig == SIGHUP;
    if (sig == SIGTERM || sig == SIGINT) break;
    FileStamp now = stamp(f.rules);
    if (now != last) {
      reload = true;
      last = now;
    }
    if (!reload) continue;
    policy::LoadOutcome out = store->load_file(f.rules);
    std::string restart_required;
    if (out.replaced) {
      auto snap = store->snapshot();
      gateway.set_config(config_of(snap, defaults));  // the DNS responder reads it too
      std::fprintf(log, "cordon: rules reloaded (generation %llu)\n",
                   static_cast<unsigned long long>(out.generation));
      for (const auto& name :
           policy::GatewaySettings::restart_only_changes(started, snap->gateway_settings())) {
        restart_required += (restart_required.empty() ? "" : ",") + name;
      }
      if (!restart_required.empty())
        std::fprintf(log,
                     "cordon: rules reload changed %s: applied at the next start of cordon "
                     "serve (running with the values it started with)\n",
                     restart_required.c_str());
    } else {
      std::fprintf(log, "cordon: rules file %s refused, keeping generation %llu:\n%s",
                   f.rules.c_str(), static_cast<unsigned long long>(out.generation),
                   out.errors_text().c_str());
    }
    gateway.note_reload(out.replaced);
    audit_reload(*audit_writer, out.replaced, f.rules, out.generation, out.errors_text(),
                 restart_required);
  }
  std::fprintf(log, "cordon: shutting down\n");
  sandboxes->reset();  // E2B API, control socket, manager: before what they use
  overlays->on_change(nullptr);
  // Fail closed: the program stays on the sandbox interfaces; once this process's sockets are
  // gone, its listener slots are empty and every packet drops until serve runs again.
  if (steering) {
    steering->leave_attached();
    steering.reset();
  }
  if (dns) {
    dns->stop();
    dns_io->stop();
    if (dns_thread.joinable()) dns_thread.join();
    dns.reset();
  }
  gateway.stop(5000);
  auto closed = audit_writer->close();
  if (!closed) return failed(with_context("serve: closing the audit log", closed.error()).error);
  return {};
}

}  // namespace cordon::server
