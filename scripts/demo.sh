#!/usr/bin/env bash
# The main job: the whole egress story on this machine, with no internet. Everything runs in a
# temporary state directory (and, for the gateway part, in network namespaces the demo creates),
# and everything is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bash scripts/build.sh release >/dev/null

cordon=$PWD/build/cli/cordon
state=$(mktemp -d /tmp/cordon-demo.XXXXXX)
cleanup() { rm -rf "$state"; }
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
# Runs a command whose non-zero exit is part of the story (a denial, a refusal).
run_expect_fail() {
  printf '$ %s\n' "$*"
  if "$@"; then echo "demo: expected this to be refused" >&2; exit 1; fi
}

export CORDON_HOME=$state

step "1. A state directory: root CA, master key, vault"
run "$cordon" init
ls -l "$state" "$state/ca"

step "2. The rules a platform team wrote: lint, then explain decisions"
run "$cordon" policy lint rules.example.yaml
run "$cordon" policy explain rules.example.yaml --profile coding-agent --method GET \
  --url https://api.github.com/repos/cordon/cordon/issues
run_expect_fail "$cordon" policy explain rules.example.yaml --profile coding-agent --method DELETE \
  --url https://api.github.com/repos/cordon/cordon
run_expect_fail "$cordon" policy explain rules.example.yaml --profile coding-agent --method GET \
  --url 'https://api.github.com/repos/%2e%2e/admin'
run_expect_fail "$cordon" policy explain rules.example.yaml --profile coding-agent --method GET \
  --url https://pastebin.com/raw/x
printf 'version: 1\ndestinations:\n  - id: x\n    hostz: [a.example]\n' >"$state/broken.yaml"
run_expect_fail "$cordon" policy lint "$state/broken.yaml"

step "3. A leaf certificate minted for an SNI, verified against the root"
run "$cordon" ca export >"$state/root.pem"
run "$cordon" ca mint api.github.com >"$state/leaf.pem"
openssl x509 -in "$state/leaf.pem" -noout -subject -ext subjectAltName -enddate
run openssl verify -CAfile "$state/root.pem" -verify_hostname api.github.com "$state/leaf.pem"
run_expect_fail openssl verify -CAfile "$state/root.pem" -verify_hostname evil.example "$state/leaf.pem"

step "4. Secrets and proxy tokens: the agent only ever holds a revocable token"
printf 'ghp_demo_real_secret_value' >"$state/pat.txt"
chmod 600 "$state/pat.txt"
run "$cordon" vault put github-pat --from-file "$state/pat.txt"
run "$cordon" vault list
token=$("$cordon" token issue --credential github --ttl 1h --note demo)
echo "issued token: ${token:0:12}… (printed once; only its hash is stored)"
run "$cordon" token list

step "5. The audit trail: append, verify, tamper, verify again"
run "$cordon" audit append --event demo --decision allow --reason "demo line" --rule repos host=api.github.com
run "$cordon" audit append --event demo --decision deny --reason "method not allowed" --rule no-delete host=api.github.com
run "$cordon" audit verify
run "$cordon" audit query
cp -r "$state/audit" "$state/audit-tampered"
sed -i '1s/demo line/edited line/' "$state/audit-tampered/audit.jsonl"
run_expect_fail "$cordon" audit verify "$state/audit-tampered"

step "6. Egress: a sandbox, the gateway and a fake internet, in network namespaces"
bash scripts/demo-egress.sh "$cordon"

step "done: every step above ran on this machine with no network"
