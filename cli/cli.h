// Shared plumbing of the `cordon` command: each command group lives in its own
// <group>_command.cc and registers itself on the App. Libraries return results; only the CLI
// prints (results on stdout, messages and errors on stderr).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/result.h"
#include "common/state_dir.h"

namespace cordon::cli {

// Exit codes, documented in `cordon --help`.
enum ExitCode : int {
  kExitOk = 0,           // success; for checks: the check passed
  kExitCheckFailed = 1,  // the command ran and its answer is "no" (lint errors, broken chain, deny)
  kExitUsage = 2,        // bad arguments, or a command whose part is not built yet
  kExitFailure = 3,      // could not do it: missing state, I/O error, bad key, ...
};

struct CliContext {
  std::string state_flag;  // --state
  int exit_code = kExitOk;

  StateDir state() const { return StateDir::resolve(state_flag); }
};

// Prints "cordon: <message>" to stderr and returns the code, for `return error(...)`.
int report_error(const std::string& message, int code = kExitFailure);
int report_error(const Error& e, int code = kExitFailure);

// Runs `body` as the subcommand's action, storing its exit code in ctx.
template <class F>
void on_run(CLI::App* cmd, CliContext& ctx, F body) {
  cmd->callback([&ctx, body]() { ctx.exit_code = body(); });
}

// Command groups. Each is defined in its own file.
void add_init_command(CLI::App& app, CliContext& ctx);
void add_ca_commands(CLI::App& app, CliContext& ctx);
void add_policy_commands(CLI::App& app, CliContext& ctx);
void add_audit_commands(CLI::App& app, CliContext& ctx);
void add_vault_commands(CLI::App& app, CliContext& ctx);
void add_token_commands(CLI::App& app, CliContext& ctx);
void add_apikey_commands(CLI::App& app, CliContext& ctx);
void add_serve_command(CLI::App& app, CliContext& ctx);
void add_sandbox_commands(CLI::App& app, CliContext& ctx);
void add_doctor_command(CLI::App& app, CliContext& ctx);
void add_template_commands(CLI::App& app, CliContext& ctx);

// A subcommand whose part is not built yet: says so and exits 2.
CLI::App* add_not_built(CLI::App& parent, const std::string& name, const std::string& what,
                        CliContext& ctx);

}  // namespace cordon::cli
