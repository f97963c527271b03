// `cordon serve`: runs the egress gateway (design.md §2) with the state directory's CA, vault
// and audit log and a rules file. Fail closed: the listeners open only after the policy, the
// vault, the CA and the audit log are all loaded. SIGHUP or a change of the rules file reloads
// the rules (a broken file never replaces a working one; both outcomes are audited); SIGTERM or
// SIGINT shut down gracefully.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "audit/writer.h"
#include "ca/ca.h"
#include "ca/leaf_cache.h"
#include "cli/cli.h"
#include "gateway/adapters/adapters.h"
#include "gateway/gateway.h"
#include "policy/policy_store.h"
#include "vault/admin.h"
#include "vault/vault.h"

namespace cordon::cli {

namespace {

struct ServeFlags {
  std::string rules;
  std::string transparent_listen;
  std::string proxy_listen;
  std::string admin_listen;
  std::vector<std::string> resolve;
  std::string dns_server;
  std::vector<std::string> upstream_ca;
  unsigned threads = 0;
  bool no_system_trust = false;
};

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

void audit_reload(audit::Writer& w, bool ok, const std::string& rules, uint64_t generation,
                  const std::string& errors) {
  audit::Event e;
  e.event = "policy_reload";
  e.decision = ok ? "allow" : "deny";
  e.reason = ok ? "reloaded" : "rules_invalid";
  e.add("file", rules);
  e.add("generation", static_cast<int64_t>(generation));
  if (!ok) e.add("errors", errors.substr(0, 2000));
  (void)w.append(e);  // a failing writer also makes the gateway deny requests
}

int serve(CliContext& ctx, const ServeFlags& f) {
  using namespace cordon::gateway;
  if (!f.dns_server.empty()) {
    return report_error(
        "--dns-server is not implemented yet (use the system resolver or --resolve)", kExitUsage);
  }
  if (f.proxy_listen.empty() && f.transparent_listen.empty()) {
    return report_error("serve: give --proxy-listen and/or --transparent-listen", kExitUsage);
  }
  GatewayOptions opts;
  for (const auto& r : f.resolve) {
    size_t eq = r.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == r.size()) {
      return report_error("--resolve '" + r + "': expected HOST=IP", kExitUsage);
    }
    std::string host = r.substr(0, eq);
    for (auto& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    opts.resolve[host] = r.substr(eq + 1);
  }
  opts.upstream_ca_files = f.upstream_ca;
  opts.system_trust_store = !f.no_system_trust;
  opts.threads = f.threads;

  StateDir state = ctx.state();

  // Everything loads before anything listens (fail closed).
  auto store = std::make_shared<policy::PolicyStore>();
  policy::LoadOutcome loaded = store->load_file(f.rules);
  if (!loaded.replaced) {
    std::fprintf(stderr, "%s", loaded.errors_text().c_str());
    return report_error("serve: rules file " + f.rules + " is not valid", kExitCheckFailed);
  }
  auto vault = vault::Vault::open(state);
  if (!vault) return report_error(with_context("serve: opening the vault", vault.error()).error);
  std::shared_ptr<vault::Vault> vault_shared(std::move(*vault));
  auto authority = ca::Authority::load(state);
  if (!authority)
    return report_error(with_context("serve: loading the CA", authority.error()).error);
  ca::LeafCacheOptions cache_opts;
  cache_opts.mints_per_second = opts.limits.max_mints_per_second;
  cache_opts.mint_burst = opts.limits.max_mints_per_second;
  auto leaves = std::make_shared<ca::LeafCertCache>(*authority, cache_opts);
  audit::WriterOptions wopts;
  wopts.dir = state.audit_dir();
  auto writer = audit::Writer::open(wopts);
  if (!writer)
    return report_error(with_context("serve: opening the audit log", writer.error()).error);
  std::shared_ptr<audit::Writer> audit_writer(std::move(*writer));

  GatewayPorts ports;
  ports.certs = adapters::make_cert_provider(leaves);
  ports.sandboxes = adapters::make_sandbox_directory(vault_shared);
  ports.credentials = adapters::make_credential_source(vault_shared);
  ports.audit = adapters::make_audit_sink(audit_writer);
  auto gw = Gateway::create(opts, ports);
  if (!gw) return report_error(gw.error());
  Gateway& gateway = **gw;
  gateway.set_policy(adapters::make_policy_view(store->snapshot()));

  if (!f.proxy_listen.empty()) {
    auto p = gateway.listen_proxy(f.proxy_listen);
    if (!p) return report_error(p.error());
    std::fprintf(stderr, "cordon: explicit proxy listening on %s (port %u)\n",
                 f.proxy_listen.c_str(), static_cast<unsigned>(*p));
  }
  if (!f.transparent_listen.empty()) {
    auto p = gateway.listen_transparent(f.transparent_listen);
    if (!p) return report_error(p.error());
    std::fprintf(stderr, "cordon: transparent listener on %s (port %u)\n",
                 f.transparent_listen.c_str(), static_cast<unsigned>(*p));
  }
  if (!f.admin_listen.empty()) {
    auto a = gateway.listen_admin(f.admin_listen);
    if (!a) return report_error(a.error());
    std::fprintf(stderr, "cordon: admin listening on %s\n", a->c_str());
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
    return report_error(with_context("serve: the admin socket", admin_server.error()).error);
  std::fprintf(stderr, "cordon: vault admin API on unix:%s\n", state.admin_socket().c_str());
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
    if (out.replaced) {
      gateway.set_policy(adapters::make_policy_view(store->snapshot()));
      std::fprintf(stderr, "cordon: rules reloaded (generation %llu)\n",
                   static_cast<unsigned long long>(out.generation));
    } else {
      std::fprintf(stderr, "cordon: rules file %s refused, keeping generation %llu:\n%s",
                   f.rules.c_str(), static_cast<unsigned long long>(out.generation),
                   out.errors_text().c_str());
    }
    gateway.note_reload(out.replaced);
    audit_reload(*audit_writer, out.replaced, f.rules, out.generation, out.errors_text());
  }
  std::fprintf(stderr, "cordon: shutting down\n");
  gateway.stop(5000);
  auto closed = audit_writer->close();
  if (!closed)
    return report_error(with_context("serve: closing the audit log", closed.error()).error);
  return kExitOk;
}

}  // namespace

void add_serve_command(CLI::App& app, CliContext& ctx) {
  auto flags = std::make_shared<ServeFlags>();
  auto* cmd = app.add_subcommand("serve", "run the egress gateway");
  cmd->fallthrough();  // --state may follow the subcommand
  cmd->add_option("--rules", flags->rules, "rules file (YAML)")->required();
  cmd->add_option("--transparent-listen", flags->transparent_listen,
                  "transparent listener ADDR:PORT (IP_TRANSPARENT; needs CAP_NET_ADMIN)");
  cmd->add_option("--proxy-listen", flags->proxy_listen,
                  "explicit proxy listener ADDR:PORT (CONNECT and absolute-form HTTP)");
  cmd->add_option("--admin-listen", flags->admin_listen,
                  "admin/metrics listener: loopback ADDR:PORT or unix:PATH");
  cmd->add_option("--resolve", flags->resolve,
                  "static resolution HOST=IP (repeatable; the deny floors still apply)");
  cmd->add_option("--dns-server", flags->dns_server, "upstream DNS server IP[:PORT]");
  cmd->add_option("--upstream-ca", flags->upstream_ca,
                  "extra CA file trusted for upstream certificates (repeatable)");
  cmd->add_option("--threads", flags->threads, "io threads (default: one per core)");
  cmd->add_flag("--no-system-trust", flags->no_system_trust,
                "trust only --upstream-ca files for upstream certificates");
  on_run(cmd, ctx, [&ctx, flags]() { return serve(ctx, *flags); });
}

}  // namespace cordon::cli
