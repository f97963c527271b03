#!/usr/bin/env bash
# The E2B-compatible API end to end: the real E2B JS SDK (e2b@2.51.0 from npm, cached in
# BUILD_DIR/npm/e2b) against `cordon serve --api-listen`, with gVisor sandboxes of the `base`
# template (tests/e2e/templates/ensure_base.sh). Hermetic, like sandbox_egress_e2e.sh:
#   sandbox (runsc in its netns, 10.201.x.2) | veth, steering program on the host side
#   gateway netns: `cordon serve --steering ebpf --transparent-listen ... --api-listen
#     127.0.0.1:PORT` (manager in-process) and the SDK (node sdk_e2b.mjs) on its loopback
#   fake internet: cordon-fake-upstream on 198.51.100.10:443 (own CA), nft counters of leaks
# (that topology is scripts/lib/sandbox_net.sh). The state directory is fresh but holds the
# template cache's root CA (the template trusts it) and links its templates/. SKIPPED (exit 0) without root, runsc, node/npm or the template.
# Usage: e2b_e2e.sh CORDON FAKE_UPSTREAM BUILD_DIR
set -uo pipefail
cordon=$(realpath "$1"); upstream_bin=$(realpath "$2"); build=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../../scripts/lib/sandbox_net.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root"; exit 0; }
command -v runsc >/dev/null || { echo "SKIPPED: runsc is not installed"; exit 0; }
command -v node >/dev/null || { echo "SKIPPED: node is not installed"; exit 0; }
# (ensure_sdk.sh says why on stderr when it cannot install the SDK)
e2b_module=$(sn_e2b_sdk "$build") || { echo "SKIPPED: no E2B SDK"; exit 0; }
tpl_state=$(sn_base_template "$build") || exit 1
case $tpl_state in SKIPPED:*) echo "$tpl_state"; exit 0 ;; esac
[ -f "$tpl_state/ca/root.pem" ] && [ -d "$tpl_state/templates" ] \
  || { echo "SKIPPED: $tpl_state holds no CA or templates"; exit 0; }

id=$$
gw=cdt-eb-gw-$id inet=cdt-eb-in-$id
tmp=$(mktemp -d /tmp/cordon-e2b-e2e.XXXXXX)
export CORDON_HOME=$tmp/state
api=127.0.0.1:13000
node_pid=""
failures=0 passes=0
secret=ghp_E2B_SECRET_$id

cleanup() {
  set +e
  [ -n "$node_pid" ] && { kill -TERM "$node_pid"; wait "$node_pid"; }
  sn_teardown "$CORDON_HOME"  # the sandboxes (the manager records each before making it), serve, namespaces
  rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
check() {
  local name=$1; shift
  if "$@"; then echo "PASS: $name"; passes=$((passes + 1)); else echo "FAIL: $name"; failures=$((failures + 1)); fi
}
die() { echo "FAIL: $*"; [ -f "$tmp/serve.log" ] && sed 's/^/  serve: /' "$tmp/serve.log" | tail -30; exit 1; }

# ---- topology (scripts/lib/sandbox_net.sh; the manager's pool is 10.201.0.0/16) ---------------
sn_net_up "$gw" "$inet" 10.201.0.0/16 || die "topology"
sn_upstream_start "$upstream_bin" "$tmp" "e2b e2e internet CA" api.allowed.test api.denied.test \
  || die "fake upstream"
cp "$SN_REPO/scripts/lib/agent_rules.yaml" "$tmp/rules.yaml" || die "rules"
sn_state_from_template "$tpl_state" "$CORDON_HOME" || die "state"
printf '%s' "$secret" | "$cordon" vault put gh-pat --stdin >/dev/null || die "vault put"
key=$("$cordon" apikey create --profile agent --note e2b-e2e 2>"$tmp/apikey.err") \
  || die "apikey create: $(cat "$tmp/apikey.err")"
sn_serve_start "$cordon" "$tmp/serve.log" "cordon: E2B API on" 30 --rules "$tmp/rules.yaml" \
  --transparent-listen 127.0.0.1:15001 --admin-listen 127.0.0.1:15002 --steering ebpf \
  --resolve api.allowed.test=198.51.100.10 --resolve api.denied.test=198.51.100.10 \
  --upstream-ca "$tmp/up-ca.pem" --no-system-trust --threads 2 --api-listen "$api" \
  || die "cordon serve"

# ---- the SDK, from the gateway namespace ----------------------------------------------------------
# In the background with wait, so that INT/TERM reach the trap at once (nsenter, env and timeout
# exec each other: $! is timeout's pid, which hands a TERM on to node).
sn_in_gw env -i PATH="$PATH" HOME="$tmp" E2B_MODULE="$e2b_module" \
  E2B_API_URL="http://$api" E2B_SANDBOX_URL="http://$api" E2B_API_KEY="$key" \
  SECRET="$secret" UPSTREAM_LOG="$tmp/upstream.jsonl" IDS_FILE="$tmp/ids" \
  timeout 480 node "$here/sdk_e2b.mjs" >"$tmp/sdk.out" 2>&1 &
node_pid=$!
wait "$node_pid"
sdk_rc=$?
node_pid=""
cat "$tmp/sdk.out"
passes=$((passes + $(grep -c '^PASS: ' "$tmp/sdk.out")))
failures=$((failures + $(grep -c '^FAIL: ' "$tmp/sdk.out")))
[ "$sdk_rc" -eq 0 ] || [ "$(grep -c '^FAIL: ' "$tmp/sdk.out")" -gt 0 ] \
  || check "sdk_e2b.mjs exited with status $sdk_rc" false

# ---- the audit log has the sandboxes' lines ------------------------------------------------------
main_id=$(head -1 "$tmp/ids" 2>/dev/null)
if [ -n "$main_id" ]; then
  "$cordon" audit query --sandbox "$main_id" --json >"$tmp/audit.jsonl" 2>"$tmp/audit.err"
  check "audit query --sandbox $main_id has lines ($(wc -l <"$tmp/audit.jsonl"))" test -s "$tmp/audit.jsonl"
  check "  ... the allowed request among them" grep -q 'api.allowed.test' "$tmp/audit.jsonl"
  check "  ... and the denied host" grep -q 'api.denied.test' "$tmp/audit.jsonl"
  check "  ... and never the secret" bash -c "! grep -rqF '$secret' '$CORDON_HOME/audit'"
else
  check "a sandbox id for the audit query" false
fi
check "nothing left the sandboxes except through the gateway (leak counter $(sn_leaked))" test "$(sn_leaked)" = 0

echo "$passes passed, $failures failed"
if [ "$failures" -ne 0 ]; then
  echo "--- serve log (tail) ---"; tail -40 "$tmp/serve.log"
  exit 1
fi
