// `cordon vault put|list|rm`: secrets in the vault. A value never comes from argv (it would be
// visible in ps and shell history) and no command ever prints one.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "common/file_io.h"
#include "vault/limits.h"
#include "vault/vault.h"

namespace cordon::cli {
namespace {

int exit_for(const Error& e) {
  return e.code == vault::code(vault::ErrorCode::kInvalidArgument) ? kExitUsage : kExitFailure;
}

Result<std::unique_ptr<vault::Vault>> open_vault(CliContext& ctx) {
  return vault::Vault::open(ctx.state());
}

Result<std::string> read_stdin() {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0) return fail("reading standard input failed");
    if (n == 0) break;
    out.append(buf, size_t(n));
    if (out.size() > vault::kMaxSecretBytes + 2)
      return fail("secret on standard input is too large");
  }
  return out;
}

// One trailing newline (LF or CRLF) is what `echo` and editors add; more is kept as data.
bool strip_one_newline(std::string& s) {
  if (s.size() >= 2 && s.compare(s.size() - 2, 2, "\r\n") == 0) {
    s.resize(s.size() - 2);
    return true;
  }
  if (!s.empty() && s.back() == '\n') {
    s.pop_back();
    return true;
  }
  return false;
}

}  // namespace

void add_vault_commands(CLI::App& app, CliContext& ctx) {
  auto* vault_cmd = app.add_subcommand("vault", "secrets stored encrypted in the vault");
  vault_cmd->require_subcommand(1);

  // put
  struct PutArgs {
    std::string name, env, file;
    bool use_stdin = false;
  };
  auto put_args = std::make_shared<PutArgs>();
  auto* put = vault_cmd->add_subcommand(
      "put",
      "store a secret (a new version if NAME exists). The value is read from an environment\n"
      "variable, a file or standard input, never from the command line. One trailing newline\n"
      "(LF or CRLF) is stripped from file and stdin input; empty values are refused.");
  put->add_option("NAME", put_args->name, "secret name (letters, digits, - _ .)")->required();
  auto* o_env = put->add_option("--from-env", put_args->env, "read the value from this variable");
  auto* o_file = put->add_option("--from-file", put_args->file, "read the value from this file");
  auto* o_stdin = put->add_flag("--stdin", put_args->use_stdin, "read the value from stdin");
  o_env->excludes(o_file)->excludes(o_stdin);
  o_file->excludes(o_stdin);
  on_run(put, ctx, [&ctx, put_args, o_env, o_file, o_stdin]() {
    std::string value;
    bool stripped = false;
    if (o_env->count()) {
      const char* v = std::getenv(put_args->env.c_str());
      if (!v)
        return report_error("environment variable " + put_args->env + " is not set", kExitUsage);
      value = v;
    } else if (o_file->count()) {
      auto r = read_file(put_args->file);
      if (!r) return report_error(r.error());
      value = std::move(*r);
      stripped = strip_one_newline(value);
    } else if (o_stdin->count()) {
      auto r = read_stdin();
      if (!r) return report_error(r.error());
      value = std::move(*r);
      stripped = strip_one_newline(value);
    } else {
      return report_error(
          "say where the value comes from: --from-env VAR, --from-file PATH or --stdin",
          kExitUsage);
    }
    vault::SecretValue secret = vault::SecretValue::take(value);
    if (secret.empty()) return report_error("refusing to store an empty value", kExitUsage);
    auto v = open_vault(ctx);
    if (!v) return report_error(v.error());
    auto version = (*v)->put_secret(put_args->name, secret);
    if (!version) return report_error(version.error(), exit_for(version.error()));
    std::fprintf(stderr, "stored secret '%s' version %lld%s\n", put_args->name.c_str(),
                 static_cast<long long>(*version),
                 stripped ? " (one trailing newline stripped)" : "");
    return int(kExitOk);
  });

  // list
  auto json_out = std::make_shared<bool>(false);
  auto* list =
      vault_cmd->add_subcommand("list", "list secrets: name, version, created, fingerprint");
  list->add_flag("--json", *json_out, "print JSON");
  on_run(list, ctx, [&ctx, json_out]() {
    auto v = open_vault(ctx);
    if (!v) return report_error(v.error());
    auto secrets = (*v)->list_secrets();
    if (!secrets) return report_error(secrets.error());
    if (*json_out) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& s : *secrets)
        arr.push_back({{"name", s.name},
                       {"version", s.version},
                       {"created", format_rfc3339_micros(s.created)},
                       {"fingerprint", s.fingerprint}});
      std::printf("%s\n", arr.dump(2).c_str());
      return int(kExitOk);
    }
    std::printf("%-32s %7s  %-27s  %s\n", "NAME", "VERSION", "CREATED", "FINGERPRINT");
    for (const auto& s : *secrets)
      std::printf("%-32s %7lld  %-27s  %s\n", s.name.c_str(), static_cast<long long>(s.version),
                  format_rfc3339_micros(s.created).c_str(), s.fingerprint.c_str());
    return int(kExitOk);
  });

  // rm
  auto rm_name = std::make_shared<std::string>();
  auto* rm = vault_cmd->add_subcommand("rm", "remove a secret and all its versions");
  rm->add_option("NAME", *rm_name, "secret name")->required();
  on_run(rm, ctx, [&ctx, rm_name]() {
    auto v = open_vault(ctx);
    if (!v) return report_error(v.error());
    if (auto s = (*v)->remove_secret(*rm_name); !s)
      return report_error(s.error(), exit_for(s.error()));
    std::fprintf(stderr, "removed secret '%s'\n", rm_name->c_str());
    return int(kExitOk);
  });
}

}  // namespace cordon::cli
