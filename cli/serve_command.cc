// `cordon serve`: parses its flags into a server::ServerOptions and runs the server
// (server/server.h: the parts, their start and stop order, signals and reloads).
#include <memory>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "gateway/dns_responder.h"
#include "server/server.h"

namespace cordon::cli {

namespace {

int serve(CliContext& ctx, server::ServerOptions o, const std::vector<std::string>& warm) {
  o.state = ctx.state();
  for (const auto& w : warm) {
    size_t eq = w.find('=');
    char* end = nullptr;
    unsigned long n = eq == std::string::npos ? 0 : std::strtoul(w.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || eq == 0 || !end || *end || n > 1024)
      return report_error("--warm-pool '" + w + "': expected TEMPLATE=N (N up to 1024)",
                          kExitUsage);
    o.warm_pool[w.substr(0, eq)] = static_cast<uint32_t>(n);
  }
  server::Server s(std::move(o));
  server::RunOutcome out = s.run(stderr);
  if (out.exit_code != 0) return report_error(out.error, out.exit_code);
  return kExitOk;
}

}  // namespace

void add_serve_command(CLI::App& app, CliContext& ctx) {
  auto flags = std::make_shared<server::ServerOptions>();
  flags->dns_queries_per_second = gateway::DnsResponderOptions{}.queries_per_second;
  flags->dns_query_burst = gateway::DnsResponderOptions{}.query_burst;
  auto warm = std::make_shared<std::vector<std::string>>();
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
  cmd->add_option("--steering", flags->steering,
                  "confine sandbox interfaces: ebpf (tc program + bpf_sk_assign), nftables "
                  "(TPROXY fallback), auto (what `cordon doctor` reports), none. Default: auto "
                  "when this process can steer (CAP_NET_ADMIN + CAP_BPF/CAP_SYS_ADMIN and "
                  "--transparent-listen), else none with a notice. "
                  "Interfaces are attached by `cordon sandbox netns create` through "
                  "STATE/steering.sock; they stay closed while serve is stopped");
  cmd->add_option("--dns-listen", flags->dns_listen,
                  "DNS responder ADDR:PORT, UDP and TCP (repeatable; with --steering: "
                  "127.0.0.1 and ::1, the steering finds the sockets)");
  cmd->add_option("--dns-synthetic-ipv4", flags->dns_synthetic_ipv4,
                  "address the DNS responder gives for allowed names (the steering sends "
                  "TCP 80/443 to the gateway whatever the address)")
      ->capture_default_str();
  cmd->add_option("--dns-queries-per-second", flags->dns_queries_per_second,
                  "DNS queries a sandbox may send per second, sustained (more are REFUSED; "
                  "0 = no limit)")
      ->capture_default_str();
  cmd->add_option("--dns-query-burst", flags->dns_query_burst,
                  "DNS queries a sandbox may send at once above that rate")
      ->capture_default_str();
  cmd->add_option("--api-listen", flags->api_listen,
                  "E2B-compatible API (control plane + envd relay) ADDR:PORT; loopback only "
                  "unless --api-tls-cert/--api-tls-key are given (API keys travel on it); "
                  "runs the sandbox manager");
  cmd->add_option("--api-tls-cert", flags->api_tls_cert, "PEM certificate chain of the E2B API");
  cmd->add_option("--api-tls-key", flags->api_tls_key, "PEM private key of the E2B API");
  cmd->add_flag("--sandboxes", flags->sandboxes,
                "run the sandbox manager and its control socket (STATE/sandbox.sock) even "
                "without --api-listen");
  cmd->add_option("--warm-pool", *warm,
                  "TEMPLATE=N: keep N prepared sandboxes of a template (repeatable)");
  cmd->add_option("--max-sandboxes", flags->max_sandboxes,
                  "sandboxes (running, paused, pooled) beyond which creates answer 429")
      ->capture_default_str();
  on_run(cmd, ctx, [&ctx, flags, warm]() { return serve(ctx, *flags, *warm); });
}

}  // namespace cordon::cli
