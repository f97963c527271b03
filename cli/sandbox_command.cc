// `cordon sandbox register|list|unregister`: sandbox identities for the gateway (issue 4). A
// registration names a sandbox, its policy profile and optionally its source address
// (transparent mode); `register` prints the sandbox's proxy secret once, alone on stdout, for
// explicit-proxy use (Proxy-Authorization: Basic id:secret). Only a hash is kept.
//
// `cordon sandbox create|exec|list|kill|pause|resume`: sandboxes of the manager inside the
// running `cordon serve`, asked over its control socket (sandbox/manager/control.h). `create`
// prints the id alone on stdout; `exec ID -- CMD...` streams the output and exits with the
// command's exit code. `list` shows the manager's sandboxes when serve answers, the vault's
// registrations otherwise (and always with --registrations).
//
// `cordon sandbox netns create|delete|list` (issue 5): a sandbox as a network namespace, until
// the sandbox manager exists. create = namespace + veth + pool addresses (sandbox/netns.h), the
// steering program on the host side (asked of the running `cordon serve --steering ...` over
// its control socket, sandbox/steering_service.h), then the vault registration with the
// sandbox's address. In that order, and undone on any failure: nothing can run in the
// namespace before the program is on its interface, and no registration outlives its
// interface. It acts in serve's network namespace: the current one, or --gateway-netns NS
// (entered with setns; not `ip netns exec NS cordon ...`, whose private mount namespace would
// hide the new /run/netns/NAME from everyone else).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "sandbox/manager/control.h"
#include "sandbox/netns.h"
#include "sandbox/steering_service.h"
#include "vault/vault.h"

namespace cordon::cli {
namespace {

int exit_for(const Error& e) {
  return e.code == vault::code(vault::ErrorCode::kInvalidArgument) ? kExitUsage : kExitFailure;
}

nlohmann::json describe(const sandbox::NetnsSandbox& s, const std::string& profile) {
  return {{"name", s.name},
          {"netns", s.netns_path},
          {"profile", profile},
          {"host_interface", s.host_ifname},
          {"address", s.sandbox_ipv4},
          {"gateway", s.host_ipv4},
          {"address6", s.sandbox_ipv6},
          {"gateway6", s.host_ipv6},
          {"resolv_conf", s.resolv_conf}};
}

int print_manager_list(const std::vector<sandbox::SandboxRecord>& list, bool json_out) {
  if (json_out) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : list)
      arr.push_back({{"id", r.id},
                     {"template", r.template_alias},
                     {"profile", r.profile},
                     {"backend", r.backend},
                     {"state", r.state == sandbox::SandboxState::kPaused ? "paused" : "running"},
                     {"address", r.address},
                     {"started_at", format_rfc3339_micros(r.started_at)},
                     {"end_at", format_rfc3339_micros(r.end_at)}});
    std::printf("%s\n", arr.dump(2).c_str());
    return int(kExitOk);
  }
  std::printf("%-20s  %-12s  %-16s  %-8s  %-7s  %-15s  %s\n", "ID", "TEMPLATE", "PROFILE",
              "BACKEND", "STATE", "ADDRESS", "ENDS");
  for (const auto& r : list)
    std::printf("%-20s  %-12s  %-16s  %-8s  %-7s  %-15s  %s\n", r.id.c_str(),
                r.template_alias.c_str(), r.profile.c_str(), r.backend.c_str(),
                r.state == sandbox::SandboxState::kPaused ? "paused" : "running", r.address.c_str(),
                format_rfc3339_micros(r.end_at).c_str());
  return int(kExitOk);
}

int manager_error(const Error& e) {
  using sandbox::ManagerError;
  int code = e.code == sandbox::code(ManagerError::kInvalidArgument) ? kExitUsage : kExitFailure;
  return report_error(e, code);
}

void add_lifecycle_commands(CLI::App& cmd, CliContext& ctx) {
  struct CreateArgs {
    std::string template_name = "base", profile, backend = "auto";
    std::vector<std::string> env;
    int64_t timeout = 300;
  };
  auto a = std::make_shared<CreateArgs>();
  auto* create = cmd.add_subcommand(
      "create", "create a sandbox from a template in the running serve; prints its id");
  create->add_option("--template", a->template_name, "template alias or id")->capture_default_str();
  create->add_option("--profile", a->profile, "policy profile of the rules file")->required();
  create->add_option("--env", a->env, "K=V, default env of every process (repeatable)");
  create->add_option("--timeout", a->timeout, "seconds until it is killed")->capture_default_str();
  create->add_option("--backend", a->backend, "auto | gvisor | microvm")->capture_default_str();
  on_run(create, ctx, [&ctx, a]() {
    sandbox::CreateSpec spec;
    spec.template_name = a->template_name;
    spec.profile = a->profile;
    spec.timeout = std::chrono::seconds(a->timeout);
    if (a->backend == "gvisor")
      spec.backend = sandbox::BackendKind::kGvisor;
    else if (a->backend == "microvm")
      spec.backend = sandbox::BackendKind::kMicrovm;
    else if (a->backend != "auto")
      return report_error("--backend: '" + a->backend + "' is not auto, gvisor or microvm",
                          kExitUsage);
    for (const auto& kv : a->env) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        return report_error("--env '" + kv + "': expected K=V", kExitUsage);
      spec.env_vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    auto r = sandbox::control_create(sandbox::manager_socket_path(ctx.state()), spec);
    if (!r) return manager_error(r.error());
    std::printf("%s\n", r->id.c_str());
    return int(kExitOk);
  });

  struct ExecArgs {
    std::string id, user = "user";
    std::vector<std::string> argv;
  };
  auto e = std::make_shared<ExecArgs>();
  auto* exec = cmd.add_subcommand("exec", "run a command in a sandbox: exec ID -- CMD...");
  exec->add_option("ID", e->id, "sandbox id")->required();
  exec->add_option("--user", e->user, "user inside the sandbox")->capture_default_str();
  exec->add_option("CMD", e->argv, "command and arguments (after --)")->required();
  exec->positionals_at_end();
  on_run(exec, ctx, [&ctx, e]() {
    if (!e->argv.empty() && e->argv.front() == "--") e->argv.erase(e->argv.begin());
    if (e->argv.empty()) return report_error("exec: no command after --", kExitUsage);
    auto code = sandbox::control_exec(
        sandbox::manager_socket_path(ctx.state()), e->id, e->argv, e->user,
        [](std::string_view d) {
          std::fwrite(d.data(), 1, d.size(), stdout);
          std::fflush(stdout);
        },
        [](std::string_view d) {
          std::fwrite(d.data(), 1, d.size(), stderr);
          std::fflush(stderr);
        });
    if (!code) return manager_error(code.error());
    return *code < 0 ? 128 + 9 : *code;  // killed by a signal: as a shell reports SIGKILL
  });

  using Op = Status (*)(const std::string&, const std::string&);
  struct Simple {
    const char* name;
    const char* help;
    Op op;
    const char* done;
  };
  for (const Simple& s :
       {Simple{"kill", "stop and remove a sandbox", &sandbox::control_kill, "killed"},
        Simple{"pause", "freeze a sandbox in place", &sandbox::control_pause, "paused"},
        Simple{"resume", "thaw a paused sandbox", &sandbox::control_resume, "resumed"}}) {
    auto id = std::make_shared<std::string>();
    auto* sub = cmd.add_subcommand(s.name, s.help);
    sub->add_option("ID", *id, "sandbox id")->required();
    on_run(sub, ctx, [&ctx, id, s]() {
      if (auto st = s.op(sandbox::manager_socket_path(ctx.state()), *id); !st)
        return manager_error(st.error());
      std::fprintf(stderr, "%s sandbox '%s'\n", s.done, id->c_str());
      return int(kExitOk);
    });
  }
}

void add_netns_commands(CLI::App& parent, CliContext& ctx) {
  auto* netns = parent.add_subcommand(
      "netns", "sandboxes as network namespaces, confined by `cordon serve --steering`");
  netns->require_subcommand(1);

  struct CreateArgs {
    std::string name, profile, pool = "10.200.0.0/16", gateway_netns;
    bool no_ipv6 = false;
  };
  auto cargs = std::make_shared<CreateArgs>();
  auto* create = netns->add_subcommand(
      "create",
      "create namespace NAME with a veth pair and pool addresses, attach the steering program "
      "(cordon serve must run with --steering), register NAME with the vault");
  create->add_option("NAME", cargs->name, "sandbox name = namespace = vault id (a-z 0-9 -)")
      ->required();
  create->add_option("--profile", cargs->profile, "policy profile of the rules file")->required();
  create->add_option("--pool", cargs->pool, "IPv4 pool, one /30 per sandbox")
      ->capture_default_str();
  create->add_flag("--no-ipv6", cargs->no_ipv6, "give the sandbox no IPv6 address");
  create->add_option("--gateway-netns", cargs->gateway_netns,
                     "network namespace where cordon serve runs (default: this one)");
  on_run(create, ctx, [&ctx, cargs]() {
    if (auto st = vault::validate_sandbox_id(cargs->name); !st)
      return report_error(st.error(), kExitUsage);
    if (auto st = sandbox::validate_sandbox_name(cargs->name); !st)
      return report_error(st.error(), kExitUsage);
    StateDir state = ctx.state();
    auto v = vault::Vault::open(state);
    if (!v) return report_error(v.error());
    std::unique_ptr<sandbox::ScopedNetns> in_gateway;
    if (!cargs->gateway_netns.empty()) {
      auto in = sandbox::ScopedNetns::enter(cargs->gateway_netns);
      if (!in) return report_error(in.error());
      in_gateway = std::move(*in);
    }
    sandbox::NetnsPool pool;
    pool.ipv4_cidr = cargs->pool;
    pool.ipv6 = !cargs->no_ipv6;
    auto sb = sandbox::create_netns_sandbox(cargs->name, pool);
    if (!sb) return report_error(sb.error());
    auto undo = [&](const Error& e) {
      (void)sandbox::delete_netns_sandbox(cargs->name);
      return report_error(with_context("sandbox netns create " + cargs->name, e).error);
    };
    sandbox::Attachment a{cargs->name, sb->host_ifname, sb->sandbox_ipv4, sb->sandbox_ipv6};
    if (auto st = sandbox::steering_attach(state.steering_socket(), a); !st)
      return undo(st.error());
    auto r = (*v)->register_sandbox(cargs->name, cargs->profile, sb->sandbox_ipv4);
    if (!r) {
      (void)sandbox::steering_detach(state.steering_socket(), sb->host_ifname);
      return undo(r.error());
    }
    std::fprintf(stderr,
                 "created sandbox '%s': netns %s, address %s (gateway %s), interface %s, profile "
                 "'%s'\n",
                 sb->name.c_str(), sb->netns_path.c_str(), sb->sandbox_ipv4.c_str(),
                 sb->host_ipv4.c_str(), sb->host_ifname.c_str(), cargs->profile.c_str());
    std::printf("%s\n", describe(*sb, cargs->profile).dump().c_str());
    return int(kExitOk);
  });

  auto dname = std::make_shared<std::string>();
  auto dgw = std::make_shared<std::string>();
  auto* del = netns->add_subcommand(
      "delete", "detach the steering, remove the namespace, its veth and its registration");
  del->add_option("NAME", *dname, "sandbox name")->required();
  del->add_option("--gateway-netns", *dgw,
                  "network namespace where cordon serve runs (default: this one)");
  on_run(del, ctx, [&ctx, dname, dgw]() {
    if (auto st = sandbox::validate_sandbox_name(*dname); !st)
      return report_error(st.error(), kExitUsage);
    StateDir state = ctx.state();
    std::unique_ptr<sandbox::ScopedNetns> in_gateway;
    if (!dgw->empty()) {
      auto in = sandbox::ScopedNetns::enter(*dgw);
      if (!in) return report_error(in.error());
      in_gateway = std::move(*in);
    }
    std::string host_if = sandbox::host_ifname_for(*dname);
    // serve may be stopped: deleting the veth removes the filter anyway; say so and go on.
    if (auto st = sandbox::steering_detach(state.steering_socket(), host_if); !st)
      std::fprintf(stderr, "note: %s\n", st.error().message.c_str());
    if (auto st = sandbox::delete_netns_sandbox(*dname); !st) return report_error(st.error());
    auto v = vault::Vault::open(state);
    if (!v) return report_error(v.error());
    if (auto st = (*v)->unregister_sandbox(*dname);
        !st && st.error().code != vault::code(vault::ErrorCode::kNotFound))
      return report_error(st.error());
    std::fprintf(stderr, "deleted sandbox '%s'\n", dname->c_str());
    return int(kExitOk);
  });

  auto* list = netns->add_subcommand(
      "list", "interfaces the running serve confines, with their counters (JSON)");
  on_run(list, ctx, [&ctx]() {
    auto r = sandbox::steering_list(ctx.state().steering_socket());
    if (!r) return report_error(r.error());
    std::printf("%s", r->c_str());
    return int(kExitOk);
  });
}

}  // namespace

void add_sandbox_commands(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("sandbox", "sandboxes known to the gateway");
  cmd->require_subcommand(1);

  struct RegisterArgs {
    std::string id, profile, address;
  };
  auto args = std::make_shared<RegisterArgs>();
  auto* reg = cmd->add_subcommand(
      "register",
      "register a sandbox id with a profile (and source address); prints its proxy secret once");
  reg->add_option("ID", args->id, "sandbox id: lowercase letters, digits, '-' (max 63)")
      ->required();
  reg->add_option("--profile", args->profile, "policy profile of the rules file")->required();
  auto* o_addr = reg->add_option("--address", args->address, "source IP (v4 or v6) of the sandbox");
  on_run(reg, ctx, [&ctx, args, o_addr]() {
    auto v = vault::Vault::open(ctx.state());
    if (!v) return report_error(v.error());
    std::optional<std::string_view> addr;
    if (o_addr->count()) addr = args->address;
    auto r = (*v)->register_sandbox(args->id, args->profile, addr);
    if (!r) return report_error(r.error(), exit_for(r.error()));
    std::fprintf(stderr, "registered sandbox '%s' (profile '%s'%s%s)\n", r->info.id.c_str(),
                 r->info.profile.c_str(), r->info.address ? ", address " : "",
                 r->info.address ? r->info.address->c_str() : "");
    std::fwrite(r->proxy_secret.view().data(), 1, r->proxy_secret.size(), stdout);
    std::fputc('\n', stdout);
    return int(kExitOk);
  });

  auto json_out = std::make_shared<bool>(false);
  auto registrations = std::make_shared<bool>(false);
  auto* list = cmd->add_subcommand(
      "list", "list the sandboxes of the running serve (else the vault's registrations)");
  list->add_flag("--json", *json_out, "print JSON");
  list->add_flag("--registrations", *registrations,
                 "list the vault's registrations (id, profile, address) instead");
  on_run(list, ctx, [&ctx, json_out, registrations]() {
    if (!*registrations) {
      auto l = sandbox::control_list(sandbox::manager_socket_path(ctx.state()));
      if (l) return print_manager_list(*l, *json_out);
    }
    auto v = vault::Vault::open(ctx.state());
    if (!v) return report_error(v.error());
    auto list = (*v)->list_sandboxes();
    if (!list) return report_error(list.error());
    if (*json_out) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& s : *list)
        arr.push_back(
            {{"id", s.id},
             {"profile", s.profile},
             {"address", s.address ? nlohmann::json(*s.address) : nlohmann::json(nullptr)},
             {"created", format_rfc3339_micros(s.created)}});
      std::printf("%s\n", arr.dump(2).c_str());
      return int(kExitOk);
    }
    std::printf("%-24s  %-20s  %-39s  %s\n", "ID", "PROFILE", "ADDRESS", "CREATED");
    for (const auto& s : *list)
      std::printf("%-24s  %-20s  %-39s  %s\n", s.id.c_str(), s.profile.c_str(),
                  s.address ? s.address->c_str() : "-", format_rfc3339_micros(s.created).c_str());
    return int(kExitOk);
  });

  auto unreg_id = std::make_shared<std::string>();
  auto* unreg = cmd->add_subcommand("unregister", "forget a sandbox registration");
  unreg->add_option("ID", *unreg_id, "sandbox id")->required();
  on_run(unreg, ctx, [&ctx, unreg_id]() {
    auto v = vault::Vault::open(ctx.state());
    if (!v) return report_error(v.error());
    if (auto s = (*v)->unregister_sandbox(*unreg_id); !s)
      return report_error(s.error(), exit_for(s.error()));
    std::fprintf(stderr, "unregistered sandbox '%s'\n", unreg_id->c_str());
    return int(kExitOk);
  });

  add_netns_commands(*cmd, ctx);

  add_lifecycle_commands(*cmd, ctx);
}

}  // namespace cordon::cli
