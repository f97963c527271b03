// `cordon ca init|export|mint`: the local CA (ca/ca.h).
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cstdio>

#include "ca/ca.h"
#include "cli/cli.h"
#include "common/encoding.h"

namespace cordon::cli {
namespace {

// The state directory must exist: creating it is `cordon init`'s job, which also sets its mode.
int check_state_dir(const StateDir& state) {
  struct stat st;
  if (::stat(state.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return report_error(
        "state directory " + state.root + " does not exist; run 'cordon init' or pass --state DIR",
        kExitFailure);
  return kExitOk;
}

std::string fingerprint(X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  X509_digest(cert, EVP_sha256(), md, &len);
  std::string hex = hex_encode(std::string(reinterpret_cast<char*>(md), len));
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    if (!out.empty()) out += ':';
    out += hex.substr(i, 2);
  }
  return out;
}

}  // namespace

void add_ca_commands(CLI::App& app, CliContext& ctx) {
  auto* ca = app.add_subcommand("ca", "local CA: create the root, export it, mint leaves");
  ca->require_subcommand(1);

  auto* init = ca->add_subcommand("init", "create the root CA and the shared leaf key");
  auto force = std::make_shared<bool>(false);
  init->add_flag("--force", *force,
                 "replace an existing CA (templates trusting the old root must be rebuilt)");
  on_run(init, ctx, [&ctx, force]() {
    StateDir state = ctx.state();
    if (int rc = check_state_dir(state); rc != kExitOk) return rc;
    auto authority = ca::Authority::create(state, *force);
    if (!authority) return report_error(authority.error());
    std::printf("root certificate: %s\nSHA-256 fingerprint: %s\n", state.ca_cert().c_str(),
                fingerprint((*authority)->root_cert().get()).c_str());
    return int(kExitOk);
  });

  auto* exp = ca->add_subcommand("export", "print the root certificate (PEM) to stdout");
  on_run(exp, ctx, [&ctx]() {
    StateDir state = ctx.state();
    if (int rc = check_state_dir(state); rc != kExitOk) return rc;
    auto pem = ca::read_root_pem(state);
    if (!pem) return report_error(pem.error());
    std::fwrite(pem->data(), 1, pem->size(), stdout);
    return int(kExitOk);
  });

  auto* mint = ca->add_subcommand("mint", "mint a leaf for NAME and print it (PEM) to stdout");
  auto name = std::make_shared<std::string>();
  auto chain = std::make_shared<bool>(false);
  mint->add_option("NAME", *name, "DNS name or IP address")->required();
  mint->add_flag("--chain", *chain, "print the root after the leaf");
  on_run(mint, ctx, [&ctx, name, chain]() {
    StateDir state = ctx.state();
    if (int rc = check_state_dir(state); rc != kExitOk) return rc;
    auto authority = ca::Authority::load(state);
    if (!authority) return report_error(authority.error());
    auto leaf = (*authority)->mint(*name);
    if (!leaf)
      return report_error(leaf.error(), leaf.error().code == int(ca::CaError::kBadName)
                                            ? kExitUsage
                                            : kExitFailure);
    auto pem = ca::to_pem(leaf->cert.get());
    if (!pem) return report_error(pem.error());
    std::fwrite(pem->data(), 1, pem->size(), stdout);
    if (*chain)
      std::fwrite((*authority)->root_pem().data(), 1, (*authority)->root_pem().size(), stdout);
    return int(kExitOk);
  });
}

}  // namespace cordon::cli
