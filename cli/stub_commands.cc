// Fallbacks for command groups whose parts are not built yet. They are weak symbols: a
// <group>_command.cc that defines the same function replaces its fallback at link time.
#include "cli/cli.h"

namespace cordon::cli {

[[gnu::weak]] void add_init_command(CLI::App& app, CliContext& ctx) {
  add_not_built(app, "init", "create the state directory", ctx);
}
[[gnu::weak]] void add_ca_commands(CLI::App& app, CliContext& ctx) {
  add_not_built(app, "ca", "local CA", ctx);
}
[[gnu::weak]] void add_policy_commands(CLI::App& app, CliContext& ctx) {
  add_not_built(app, "policy", "rules", ctx);
}
[[gnu::weak]] void add_audit_commands(CLI::App& app, CliContext& ctx) {
  add_not_built(app, "audit", "audit log", ctx);
}
[[gnu::weak]] void add_vault_commands(CLI::App& app, CliContext& ctx) {
  add_not_built(app, "vault", "secrets", ctx);
}
[[gnu::weak]] void add_token_commands(CLI::App& app, CliContext& ctx) {
  add_not_built(app, "token", "proxy tokens", ctx);
}
[[gnu::weak]] void add_apikey_commands(CLI::App& app, CliContext& ctx) {
  add_not_built(app, "apikey", "API keys", ctx);
}
[[gnu::weak]] void add_serve_command(CLI::App& app, CliContext& ctx) {
  add_not_built(app, "serve", "run the gateway", ctx);
}
[[gnu::weak]] void add_sandbox_commands(CLI::App& app, CliContext& ctx) {
  add_not_built(app, "sandbox", "sandboxes", ctx);
}
[[gnu::weak]] void add_doctor_command(CLI::App& app, CliContext& ctx) {
  add_not_built(app, "doctor", "check this host", ctx);
}

}  // namespace cordon::cli
