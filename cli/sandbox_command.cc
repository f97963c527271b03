// `cordon sandbox register|list|unregister`: sandbox identities for the gateway (issue 4). A
// registration names a sandbox, its policy profile and optionally its source address
// (transparent mode); `register` prints the sandbox's proxy secret once, alone on stdout, for
// explicit-proxy use (Proxy-Authorization: Basic id:secret). Only a hash is kept.
// (The sandbox manager's create/exec/kill will join this group.)
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "vault/vault.h"

namespace cordon::cli {
namespace {

int exit_for(const Error& e) {
  return e.code == vault::code(vault::ErrorCode::kInvalidArgument) ? kExitUsage : kExitFailure;
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
  auto* list = cmd->add_subcommand("list", "list registered sandboxes: id, profile, address");
  list->add_flag("--json", *json_out, "print JSON");
  on_run(list, ctx, [&ctx, json_out]() {
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

  // The sandbox lifecycle (design.md §7, §8) comes with the sandbox manager.
  add_not_built(*cmd, "create", "create a sandbox from a template", ctx);
  add_not_built(*cmd, "exec", "run a command in a sandbox", ctx);
  add_not_built(*cmd, "kill", "stop and remove a sandbox", ctx);
}

}  // namespace cordon::cli
