// A second process for the vault's cross-process tests and benchmark.
//   vault_e2e_helper write-loop STATE   writes batches forever; prints "<i>\n" after batch i
//                                        is committed (so the parent knows what was acked)
//   vault_e2e_helper revoke STATE ID     revokes a token; prints CLOCK_MONOTONIC ns right
//                                        after the commit returned
//   vault_e2e_helper issue STATE CRED    issues a token; prints "<id> <token>"
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <string>

#include "vault/vault.h"

namespace {

using cordon::StateDir;
using cordon::vault::SecretValue;
using cordon::vault::Vault;

int die(const std::string& msg) {
  std::fprintf(stderr, "vault_e2e_helper: %s\n", msg.c_str());
  return 3;
}

long long monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// The values the parent checks for batch i.
std::string value_for(long i) {
  return "value-" + std::to_string(i) + "-" + std::string(1500, char('a' + i % 26));
}

int write_loop(const StateDir& state) {
  auto v = Vault::open(state);
  if (!v) return die(v.error().message);
  for (long i = 0;; ++i) {
    // One batch: a new secret (two tables, one transaction), a rotation of a shared secret
    // and a token. The ack is written only after all three committed.
    std::string value = value_for(i);
    if (auto r = (*v)->put_secret("s-" + std::to_string(i), SecretValue(value)); !r)
      return die(r.error().message);
    if (auto r = (*v)->put_secret("rotating", SecretValue(value)); !r)
      return die(r.error().message);
    cordon::vault::TokenIssue t;
    t.credential = "cred";
    t.note = "batch-" + std::to_string(i);
    if (auto r = (*v)->issue_token(t); !r) return die(r.error().message);
    std::string ack = std::to_string(i) + "\n";
    if (::write(1, ack.data(), ack.size()) != ssize_t(ack.size())) return die("stdout closed");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return die("usage: write-loop STATE | revoke STATE ID | issue STATE CRED");
  std::string mode = argv[1];
  StateDir state{argv[2]};
  if (mode == "write-loop") return write_loop(state);
  if (mode == "revoke" && argc == 4) {
    auto v = Vault::open(state);
    if (!v) return die(v.error().message);
    if (auto s = (*v)->revoke_token(argv[3]); !s) return die(s.error().message);
    std::printf("%lld\n", monotonic_ns());
    return 0;
  }
  if (mode == "issue" && argc == 4) {
    auto v = Vault::open(state);
    if (!v) return die(v.error().message);
    cordon::vault::TokenIssue t;
    t.credential = argv[3];
    auto r = (*v)->issue_token(t);
    if (!r) return die(r.error().message);
    std::printf("%s %.*s\n", r->id.c_str(), int(r->token.size()), r->token.view().data());
    return 0;
  }
  return die("unknown mode " + mode);
}
