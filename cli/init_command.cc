// `cordon init`: creates the state directory and everything in it that is missing (root CA,
// shared leaf key, master key, vault database, audit directory). Never overwrites: running it
// again on a complete state directory changes nothing and says so.
#include <cstdio>

#include "ca/ca.h"
#include "cli/cli.h"
#include "common/file_io.h"
#include "vault/vault.h"

namespace cordon::cli {

void add_init_command(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand(
      "init", "create the state directory: root CA, master key, vault database, audit directory");
  on_run(cmd, ctx, [&ctx]() {
    StateDir state = ctx.state();
    if (auto st = ensure_directory(state.root, 0700); !st) return report_error(st.error());

    if (auto loaded = ca::Authority::load(state); loaded) {
      std::fprintf(stderr, "ca: kept the existing root CA in %s\n", state.ca_dir().c_str());
    } else if (loaded.error().code == int(ca::CaError::kMissing)) {
      auto created = ca::Authority::create(state, /*force=*/false);
      if (!created)
        return report_error(with_context("creating the root CA", created.error()).error);
      std::fprintf(stderr, "ca: created a root CA in %s\n", state.ca_dir().c_str());
    } else {
      // A CA that exists but does not load (bad mode, mismatched key) is an operator problem:
      // refuse rather than replace it.
      return report_error(with_context("the existing root CA", loaded.error()).error);
    }

    if (vault::Vault::exists(state)) {
      auto opened = vault::Vault::open(state);
      if (!opened) return report_error(with_context("the existing vault", opened.error()).error);
      std::fprintf(stderr, "vault: kept the existing vault %s\n", state.vault_db().c_str());
    } else {
      if (auto st = vault::Vault::initialize(state); !st)
        return report_error(with_context("creating the vault", st.error()).error);
      std::fprintf(stderr, "vault: created %s and %s (0600)\n", state.master_key().c_str(),
                   state.vault_db().c_str());
    }

    if (auto st = ensure_directory(state.audit_dir(), 0700); !st) return report_error(st.error());
    std::printf("%s\n", state.root.c_str());
    return int(kExitOk);
  });
}

}  // namespace cordon::cli
