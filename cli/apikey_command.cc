// `cordon apikey create|list|revoke`: API keys for the sandbox API (E2B `x-api-key`), each bound
// to a policy profile. `create` prints the key once, alone on stdout; only a hash is kept.
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

void add_apikey_commands(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("apikey", "API keys for the sandbox API, bound to a profile");
  cmd->require_subcommand(1);

  struct CreateArgs {
    std::string profile, note;
  };
  auto args = std::make_shared<CreateArgs>();
  auto* create = cmd->add_subcommand(
      "create", "create an API key bound to a policy profile; printed once, alone on stdout");
  create->add_option("--profile", args->profile, "policy profile of the rules file")->required();
  create->add_option("--note", args->note, "free text shown in `apikey list`");
  on_run(create, ctx, [&ctx, args]() {
    auto v = vault::Vault::open(ctx.state());
    if (!v) return report_error(v.error());
    auto k = (*v)->create_api_key(args->profile, args->note);
    if (!k) return report_error(k.error(), exit_for(k.error()));
    std::fprintf(stderr, "created API key %s for profile '%s'\n", k->id.c_str(),
                 k->profile.c_str());
    std::fwrite(k->key.view().data(), 1, k->key.size(), stdout);
    std::fputc('\n', stdout);
    return int(kExitOk);
  });

  auto json_out = std::make_shared<bool>(false);
  auto* list = cmd->add_subcommand("list", "list API keys: id, profile, created, revoked, note");
  list->add_flag("--json", *json_out, "print JSON");
  on_run(list, ctx, [&ctx, json_out]() {
    auto v = vault::Vault::open(ctx.state());
    if (!v) return report_error(v.error());
    auto keys = (*v)->list_api_keys();
    if (!keys) return report_error(keys.error());
    if (*json_out) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& k : *keys)
        arr.push_back({{"id", k.id},
                       {"profile", k.profile},
                       {"note", k.note},
                       {"created", format_rfc3339_micros(k.created)},
                       {"revoked", k.revoked ? nlohmann::json(format_rfc3339_micros(*k.revoked))
                                             : nlohmann::json(nullptr)}});
      std::printf("%s\n", arr.dump(2).c_str());
      return int(kExitOk);
    }
    std::printf("%-16s  %-20s  %-27s  %-27s  %s\n", "ID", "PROFILE", "CREATED", "REVOKED", "NOTE");
    for (const auto& k : *keys)
      std::printf("%-16s  %-20s  %-27s  %-27s  %s\n", k.id.c_str(), k.profile.c_str(),
                  format_rfc3339_micros(k.created).c_str(),
                  k.revoked ? format_rfc3339_micros(*k.revoked).c_str() : "-", k.note.c_str());
    return int(kExitOk);
  });

  auto revoke_id = std::make_shared<std::string>();
  auto* revoke = cmd->add_subcommand("revoke", "revoke an API key");
  revoke->add_option("ID", *revoke_id, "API key id")->required();
  on_run(revoke, ctx, [&ctx, revoke_id]() {
    auto v = vault::Vault::open(ctx.state());
    if (!v) return report_error(v.error());
    if (auto s = (*v)->revoke_api_key(*revoke_id); !s)
      return report_error(s.error(), exit_for(s.error()));
    std::fprintf(stderr, "revoked API key %s\n", revoke_id->c_str());
    return int(kExitOk);
  });
}

}  // namespace cordon::cli
