// `cordon token issue|list|revoke`: proxy tokens. `issue` prints the token once, alone on
// stdout (so that `T=$(cordon token issue ...)` works); everything else goes to stderr. Only a
// hash is kept, so a lost token cannot be shown again: revoke it and issue another.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "vault/vault.h"

namespace cordon::cli {
namespace {

int exit_for(const Error& e) {
  return e.code == vault::code(vault::ErrorCode::kInvalidArgument) ? kExitUsage : kExitFailure;
}

std::string time_or_dash(const std::optional<SystemTime>& t) {
  return t ? format_rfc3339_micros(*t) : "-";
}

nlohmann::json time_or_null(const std::optional<SystemTime>& t) {
  return t ? nlohmann::json(format_rfc3339_micros(*t)) : nlohmann::json(nullptr);
}

}  // namespace

void add_token_commands(CLI::App& app, CliContext& ctx) {
  auto* token_cmd = app.add_subcommand("token", "proxy tokens that stand in for credentials");
  token_cmd->require_subcommand(1);

  struct IssueArgs {
    std::string credential, sandbox, ttl, note;
  };
  auto args = std::make_shared<IssueArgs>();
  auto* issue = token_cmd->add_subcommand(
      "issue", "issue a proxy token for a credential; the token is printed once, alone on stdout");
  issue->add_option("--credential", args->credential, "credential name of the rules file")
      ->required();
  auto* o_sandbox = issue->add_option("--sandbox", args->sandbox, "only valid for this sandbox id");
  auto* o_ttl = issue->add_option("--ttl", args->ttl, "lifetime, e.g. 90s, 15m, 2h, 7d, 1h30m");
  issue->add_option("--note", args->note, "free text shown in `token list`");
  on_run(issue, ctx, [&ctx, args, o_sandbox, o_ttl]() {
    vault::TokenIssue req;
    req.credential = args->credential;
    if (o_sandbox->count()) req.sandbox = args->sandbox;
    if (o_ttl->count()) {
      req.ttl = parse_duration(args->ttl);
      if (!req.ttl)
        return report_error("invalid --ttl '" + args->ttl + "' (examples: 90s, 15m, 2h, 7d)",
                            kExitUsage);
    }
    req.note = args->note;
    auto v = vault::Vault::open(ctx.state());
    if (!v) return report_error(v.error());
    auto t = (*v)->issue_token(req);
    if (!t) return report_error(t.error(), exit_for(t.error()));
    std::fprintf(stderr, "issued token %s for credential '%s'%s%s, expires %s\n", t->id.c_str(),
                 req.credential.c_str(), req.sandbox ? ", sandbox " : "",
                 req.sandbox ? req.sandbox->c_str() : "", time_or_dash(t->expires).c_str());
    std::fwrite(t->token.view().data(), 1, t->token.size(), stdout);
    std::fputc('\n', stdout);
    return int(kExitOk);
  });

  auto json_out = std::make_shared<bool>(false);
  auto* list = token_cmd->add_subcommand(
      "list", "list tokens: id, credential, sandbox, expiry, revoked, last used (never values)");
  list->add_flag("--json", *json_out, "print JSON");
  on_run(list, ctx, [&ctx, json_out]() {
    auto v = vault::Vault::open(ctx.state());
    if (!v) return report_error(v.error());
    auto tokens = (*v)->list_tokens();
    if (!tokens) return report_error(tokens.error());
    if (*json_out) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& t : *tokens)
        arr.push_back(
            {{"id", t.id},
             {"credential", t.credential},
             {"sandbox", t.sandbox ? nlohmann::json(*t.sandbox) : nlohmann::json(nullptr)},
             {"expires", time_or_null(t.expires)},
             {"created", format_rfc3339_micros(t.created)},
             {"revoked", time_or_null(t.revoked)},
             {"last_used", time_or_null(t.last_used)},
             {"note", t.note}});
      std::printf("%s\n", arr.dump(2).c_str());
      return int(kExitOk);
    }
    std::printf("%-16s  %-20s  %-16s  %-27s  %-27s  %-27s  %s\n", "ID", "CREDENTIAL", "SANDBOX",
                "EXPIRES", "REVOKED", "LAST USED", "NOTE");
    for (const auto& t : *tokens)
      std::printf("%-16s  %-20s  %-16s  %-27s  %-27s  %-27s  %s\n", t.id.c_str(),
                  t.credential.c_str(), t.sandbox ? t.sandbox->c_str() : "-",
                  time_or_dash(t.expires).c_str(), time_or_dash(t.revoked).c_str(),
                  time_or_dash(t.last_used).c_str(), t.note.c_str());
    return int(kExitOk);
  });

  auto revoke_id = std::make_shared<std::string>();
  auto* revoke = token_cmd->add_subcommand(
      "revoke", "revoke a token; a running gateway refuses it from its next request");
  revoke->add_option("ID", *revoke_id, "token id (from `token list` or `token issue`)")->required();
  on_run(revoke, ctx, [&ctx, revoke_id]() {
    auto v = vault::Vault::open(ctx.state());
    if (!v) return report_error(v.error());
    if (auto s = (*v)->revoke_token(*revoke_id); !s)
      return report_error(s.error(), exit_for(s.error()));
    std::fprintf(stderr, "revoked token %s\n", revoke_id->c_str());
    return int(kExitOk);
  });
}

}  // namespace cordon::cli
