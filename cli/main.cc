// `cordon`: one binary, subcommands (design.md §5).
#include <cstdio>
#include <iostream>

#include "cli/cli.h"

namespace cordon::cli {

int report_error(const std::string& message, int code) {
  std::fprintf(stderr, "cordon: %s\n", message.c_str());
  return code;
}
int report_error(const Error& e, int code) {
  return report_error(e.message, code);
}

CLI::App* add_not_built(CLI::App& parent, const std::string& name, const std::string& what,
                        CliContext& ctx) {
  auto* cmd = parent.add_subcommand(name, what + " (not built yet)");
  cmd->allow_extras();
  on_run(cmd, ctx, [name]() {
    return report_error("'" + name + "' is not built yet in this version of cordon", kExitUsage);
  });
  return cmd;
}

}  // namespace cordon::cli

int main(int argc, char** argv) {
  using namespace cordon::cli;
  CLI::App app{"cordon: egress gateway for AI-agent sandboxes", "cordon"};
  app.footer(
      "State lives in one directory: --state, else $CORDON_HOME, else /var/lib/cordon.\n"
      "Exit codes: 0 ok; 1 the check failed (lint errors, broken audit chain, denied);\n"
      "            2 usage error or part not built; 3 failure (missing state, I/O, bad key).");
  app.require_subcommand(1);
  CliContext ctx;
  app.add_option("--state", ctx.state_flag, "state directory")->envname("CORDON_STATE");

  add_init_command(app, ctx);
  add_ca_commands(app, ctx);
  add_policy_commands(app, ctx);
  add_audit_commands(app, ctx);
  add_vault_commands(app, ctx);
  add_token_commands(app, ctx);
  add_apikey_commands(app, ctx);
  add_serve_command(app, ctx);
  add_sandbox_commands(app, ctx);
  add_doctor_command(app, ctx);
  add_template_commands(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  return ctx.exit_code;
}
