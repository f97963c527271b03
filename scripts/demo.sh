#!/usr/bin/env bash
# The main job: the whole story on this machine, with no internet (design.md §6: never a packet
# toward the real network). Steps 1-5 are the pieces, in a scratch state directory; step 6 is
# the product: an agent platform's code using the real E2B SDK against `cordon serve
# --api-listen`, a gVisor sandbox of a template built by `cordon template build`, and a fake
# internet in network namespaces the demo creates, none with a route out:
#   sandbox (runsc in its netns) | veth + steering program | gateway netns: cordon serve, the SDK
#   | veth | "internet" netns: cordon-fake-upstream as api.anthropic.com + api.github.com
# Exits non-zero when an expected outcome does not happen; removes everything it made, also on
# failure and Ctrl-C. Root. CORDON_BUILD_DIR=DIR uses that build tree as it is (no install, no
# build); by default the demo installs the Debian packages and builds build/ (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
start_s=$(date +%s)

if [ -n "${CORDON_BUILD_DIR:-}" ]; then
  build=$(realpath "$CORDON_BUILD_DIR")
else
  bash scripts/install-deps.sh
  bash scripts/build.sh release >/dev/null
  build=$repo/build
fi
cordon=$build/cli/cordon
upstream_bin=$build/tests/tools/fake_upstream/cordon-fake-upstream
. scripts/lib/sandbox_net.sh

tmp=$(mktemp -d /tmp/cordon-demo.XXXXXX)
state=$tmp/state  # step 6's state (the manager, the vault, the audit log)
node_pid=""
cleanup() {
  local rc=$?
  set +e
  [ -n "$node_pid" ] && { kill -TERM "$node_pid" 2>/dev/null; wait "$node_pid" 2>/dev/null; }
  sn_teardown "$state"  # the sandboxes (through serve), serve, the upstream, the namespaces
  rm -rf --one-file-system "$tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
# Runs a command whose non-zero exit is part of the story (a denial, a refusal).
run_expect_fail() {
  printf '$ %s\n' "$*"
  if "$@"; then echo "demo: expected this to be refused" >&2; exit 1; fi
}
die() {
  printf '   FAILED: %s\n' "$*" >&2
  [ -f "$tmp/serve.log" ] && { echo "   (cordon serve's log, last lines:)" >&2; tail -n 25 "$tmp/serve.log" | sed 's/^/     /' >&2; }
  exit 1
}
[ "$(id -u)" -eq 0 ] || die "the demo needs root (network namespaces, gVisor, eBPF)"
for t in ip nft nsenter runsc node sqlite3 openssl curl; do
  command -v "$t" >/dev/null || die "$t is not installed (scripts/install-deps.sh)"
done
for f in "$cordon" "$upstream_bin" "$build/agent/cordon-agent"; do
  [ -x "$f" ] || die "$f is not built"
done

# ---- 1-5: the pieces, in a scratch state ---------------------------------------------------------
export CORDON_HOME=$tmp/scratch

step "1. A state directory: root CA, master key, vault"
run "$cordon" init
ls "$CORDON_HOME"

step "2. The rules a platform team wrote: lint, then explain decisions (deny by default)"
run "$cordon" policy lint rules.example.yaml
run "$cordon" policy explain rules.example.yaml --profile coding-agent --method GET \
  --url https://api.github.com/repos/cordon/cordon/issues
run_expect_fail "$cordon" policy explain rules.example.yaml --profile coding-agent --method DELETE \
  --url https://api.github.com/repos/cordon/cordon
run_expect_fail "$cordon" policy explain rules.example.yaml --profile coding-agent --method GET \
  --url 'https://api.github.com/repos/%2e%2e/admin'
printf 'version: 1\ndestinations:\n  - id: x\n    hostz: [a.example]\n' >"$tmp/broken.yaml"
run_expect_fail "$cordon" policy lint "$tmp/broken.yaml"

step "3. A leaf certificate minted for an SNI by the local CA"
"$cordon" ca export >"$tmp/root.pem"
run "$cordon" ca mint api.github.com >"$tmp/leaf.pem"
run openssl verify -CAfile "$tmp/root.pem" -verify_hostname api.github.com "$tmp/leaf.pem"
run_expect_fail openssl verify -CAfile "$tmp/root.pem" -verify_hostname evil.example "$tmp/leaf.pem"

step "4. Secrets in the vault; the agent only ever holds a revocable proxy token"
printf 'ghp_demo_real_secret_value' | run "$cordon" vault put github-pat --stdin
run "$cordon" vault list
token=$("$cordon" token issue --credential github --ttl 1h --note demo)
echo "issued token: ${token:0:12}… (printed once; only its hash is stored)"

step "5. The audit trail is hash-chained: edit one line and verify fails"
run "$cordon" audit append --event demo --decision allow --reason "demo line" --rule repos host=api.github.com
run "$cordon" audit append --event demo --decision deny --reason "method not allowed" --rule no-delete host=api.github.com
run "$cordon" audit verify
sed -i '1s/demo line/edited line/' "$CORDON_HOME/audit/audit.jsonl"
run_expect_fail "$cordon" audit verify

# ---- 6: the E2B SDK, a gVisor sandbox, the gateway, a fake internet --------------------------------
step "6. An agent platform on the E2B SDK, with cordon as the sandbox cloud and its only way out"
echo "-- 6a. The template, the SDK, the namespaces, the fake internet, cordon serve"
t0=$(date +%s)
tpl_state=$(tests/e2e/templates/ensure_base.sh "$build" 2>"$tmp/template.err") ||
  die "no base template (cordon template build): $(tail -n 3 "$tmp/template.err")"
echo "   template base: $(readlink -f "$tpl_state/templates/aliases/base") ($(($(date +%s) - t0)) s;" \
  "Debian rootfs + cordon-agent + the root CA, cached in $tpl_state)"
e2b_module=$(sn_e2b_sdk "$build" 2>"$tmp/sdk.err") || die "no E2B SDK: $(cat "$tmp/sdk.err")"
echo "   E2B SDK: e2b@$(node -p "require('$(dirname "$(dirname "$e2b_module")")/package.json').version"), unmodified"
gw=cdemo-gw-$$ inet=cdemo-in-$$
sn_net_up "$gw" "$inet" 10.201.0.0/16 || die "the namespaces"
pat=ghp_demo_REAL_github_pat_0123456789
model_key=sk-ant-demo-REAL-model-key-9876543210
sn_upstream_start "$upstream_bin" "$tmp" "demo internet CA" api.anthropic.com api.github.com ||
  die "the fake upstream"
echo "   namespaces $gw (cordon serve) and $inet (the \"internet\": 198.51.100.10, no route out);"
echo "   fake upstream for api.anthropic.com + api.github.com on 198.51.100.10:443, its own test CA"
# The state serves the template, so it holds the root CA the template trusts (ensure_base.sh).
export CORDON_HOME=$state
sn_state_from_template "$tpl_state" "$state" || die "the state directory"
printf '%s' "$pat" | "$cordon" vault put github-pat --stdin >/dev/null || die "vault put github-pat"
printf '%s' "$model_key" | "$cordon" vault put anthropic-api-key --stdin >/dev/null || die "vault put"
api_key=$("$cordon" apikey create --profile coding-agent --note demo 2>"$tmp/apikey.err") ||
  die "apikey create: $(cat "$tmp/apikey.err")"
api=127.0.0.1:3000
sn_serve_start "$cordon" "$tmp/serve.log" "cordon: E2B API on" 30 --rules scripts/demo/rules.yaml \
  --transparent-listen 127.0.0.1:15001 --admin-listen 127.0.0.1:15002 --steering auto \
  --resolve api.anthropic.com=198.51.100.10 --resolve api.github.com=198.51.100.10 \
  --upstream-ca "$tmp/up-ca.pem" --no-system-trust --threads 2 --api-listen "$api" ||
  die "cordon serve"
sed -n 's/^cordon: \(steering\|E2B API\)/   cordon serve: \1/p' "$tmp/serve.log"
echo "   vault: github-pat, anthropic-api-key; an API key for profile coding-agent (scripts/demo/rules.yaml)"

# The platform's code, in the gateway namespace (where the API listens), in the background so
# that Ctrl-C reaches the trap at once.
sn_in_gw env -i PATH="$PATH" HOME="$tmp" CORDON_HOME="$state" CORDON="$cordon" \
  E2B_MODULE="$e2b_module" E2B_API_URL="http://$api" E2B_SANDBOX_URL="http://$api" \
  E2B_API_KEY="$api_key" UPSTREAM_LOG="$tmp/upstream.jsonl" IDS_FILE="$tmp/ids" \
  DEMO_MODEL_KEY="$model_key" DEMO_PAT="$pat" \
  timeout 300 node scripts/demo/agent.mjs &
node_pid=$!
wait "$node_pid" || { node_pid=""; die "the agent script stopped (above)"; }
node_pid=""

echo
echo "-- 6j. After the kill: nothing of the sandbox is left, nothing leaked, the chain holds"
id=$(head -n 1 "$tmp/ids")
for ns in /run/netns/cdsb-*-"$id"; do
  [ ! -e "$ns" ] || die "the sandbox's namespace ${ns##*/} is still there"
done
[ -z "$(sn_sandbox_ids "$state")" ] || die "the manager still has sandboxes: $(sn_sandbox_ids "$state" | tr '\n' ' ')"
leaked=$(sn_leaked)
[ "$leaked" = 0 ] || die "$leaked packets from the sandbox reached the fake internet directly"
echo "   ok: namespace, processes and files of $id are gone; 0 packets from the sandbox's address"
echo "       reached the fake internet (every allowed call went through the gateway)"
verify=$("$cordon" audit verify 2>&1) || die "audit verify: $verify"
echo "$verify" | sed 's/^/   /'

step "done in $(($(date +%s) - start_s)) s: every step ran on this machine, with no network"
