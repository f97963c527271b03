#!/usr/bin/env bash
# The E2B-compatible API end to end: the real E2B JS SDK (e2b@2.51.0 from npm, cached in
# BUILD_DIR/npm/e2b) against `cordon serve --api-listen`, with gVisor sandboxes of the `base`
# template (tests/e2e/templates/ensure_base.sh). Hermetic, like sandbox_egress_e2e.sh:
#   sandbox (runsc in its netns, 10.201.x.2) | veth, steering program on the host side
#   gateway netns: `cordon serve --steering ebpf --transparent-listen ... --api-listen
#     127.0.0.1:PORT` (manager in-process) and the SDK (node sdk_e2b.mjs) on its loopback
#   fake internet: cordon-fake-upstream on 198.51.100.10:443 (own CA), nft counters of leaks
# The state directory is fresh but holds the template cache's root CA (the template trusts it)
# and links its templates/. SKIPPED (exit 0) without root, runsc, node/npm or the template.
# Usage: e2b_e2e.sh CORDON FAKE_UPSTREAM BUILD_DIR
set -uo pipefail
cordon=$(realpath "$1"); upstream_bin=$(realpath "$2"); build=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../../scripts/lib/test_pki.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root"; exit 0; }
command -v runsc >/dev/null || { echo "SKIPPED: runsc is not installed"; exit 0; }
command -v node >/dev/null || { echo "SKIPPED: node is not installed"; exit 0; }
npm_cache=$build/npm/e2b
if [ ! -f "$npm_cache/node_modules/e2b/package.json" ]; then
  command -v npm >/dev/null || { echo "SKIPPED: npm is not installed"; exit 0; }
  mkdir -p "$npm_cache"
  [ -f "$npm_cache/package.json" ] || echo '{"name":"e2b-cache","private":true}' >"$npm_cache/package.json"
  if ! (cd "$npm_cache" && timeout 300 npm install --no-audit --no-fund e2b@2.51.0 >npm.log 2>&1); then
    echo "SKIPPED: npm install e2b@2.51.0 failed: $(tail -n 3 "$npm_cache/npm.log" | tr '\n' ' ')"
    exit 0
  fi
fi
tpl_state=${CORDON_SBX_TEMPLATE_STATE:-}
if [ -z "$tpl_state" ]; then
  tpl_state=$("$here/../templates/ensure_base.sh" "$build") || { echo "SKIPPED: no base template"; exit 0; }
fi
[ -f "$tpl_state/ca/root.pem" ] && [ -d "$tpl_state/templates" ] \
  || { echo "SKIPPED: $tpl_state holds no CA or templates"; exit 0; }

id=$$
gw=cdt-eb-gw-$id inet=cdt-eb-in-$id
tmp=$(mktemp -d /tmp/cordon-e2b-e2e.XXXXXX)
export CORDON_HOME=$tmp/state
api=127.0.0.1:13000
serve_pid="" upstream_pid="" node_pid=""
failures=0 passes=0
secret=ghp_E2B_SECRET_$id

kill_sandboxes() {  # every sandbox of this run (the state is ours), through serve's manager
  local s
  for s in $({ cat "$tmp/ids"; "$cordon" sandbox list; } 2>/dev/null | grep -oE '\b[a-z0-9]{20}\b' | sort -u); do "$cordon" sandbox kill "$s" >/dev/null 2>&1; done
}
cleanup() {
  set +e
  [ -n "$node_pid" ] && { kill -TERM "$node_pid"; wait "$node_pid"; }
  if [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null; then kill_sandboxes; fi
  for pid in $serve_pid $upstream_pid; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  # Backstop if serve died first: the manager names a sandbox's namespace and cgroup cdsb-<id>.
  for s in $(sort -u "$tmp/ids" 2>/dev/null); do
    for p in $(ip netns pids "cdsb-$s" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "cdsb-$s" 2>/dev/null
    find /sys/fs/cgroup -depth -type d -name "cdsb-$s*" -exec rmdir {} \; 2>/dev/null
  done
  for ns in "$gw" "$inet"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
check() {
  local name=$1; shift
  if "$@"; then echo "PASS: $name"; passes=$((passes + 1)); else echo "FAIL: $name"; failures=$((failures + 1)); fi
}
die() { echo "FAIL: $*"; [ -f "$tmp/serve.log" ] && sed 's/^/  serve: /' "$tmp/serve.log" | tail -30; exit 1; }
leaked() { ip netns exec "$inet" nft list counter inet eb_watch from_sandbox | sed -n 's/.*packets \([0-9]*\).*/\1/p'; }

# ---- topology (as sandbox_egress_e2e.sh; the manager's pool is 10.201.0.0/16) -----------------
ip netns add "$gw" && ip netns add "$inet" || die "ip netns add"
ip -n "$gw" link add up0 type veth peer name down0 netns "$inet"
ip -n "$gw" addr add 198.51.100.1/24 dev up0
ip -n "$inet" addr add 198.51.100.10/24 dev down0
for l in "$gw lo" "$gw up0" "$inet lo" "$inet down0"; do set -- $l; ip -n "$1" link set "$2" up; done
ip -n "$inet" route add 10.201.0.0/16 via 198.51.100.1
ip netns exec "$gw" sysctl -qw net.ipv4.ip_forward=1
ip netns exec "$inet" nft -f - <<'NFT' || die "nft watch"
table inet eb_watch {
  counter from_sandbox {}
  chain in { type filter hook prerouting priority -300; policy accept;
    ip saddr 10.201.0.0/16 counter name from_sandbox
  }
}
NFT
make_upstream_cert "$tmp" "e2b e2e internet CA" api.allowed.test api.denied.test || die "upstream cert"
ip netns exec "$inet" "$upstream_bin" "$tmp/up.pem" "$tmp/up.key" 198.51.100.10:443 \
  >"$tmp/upstream.jsonl" 2>"$tmp/upstream.log" &
upstream_pid=$!
cat >"$tmp/rules.yaml" <<'YAML'
version: 1
dns: {unlisted: nxdomain}
credentials:
  - name: gh
    secret: gh-pat
    inject: {header: Authorization, format: "Bearer {secret}"}
destinations:
  - id: allowed
    hosts: [api.allowed.test]
    routes:
      - {id: get, methods: [GET], credential: gh}
profiles:
  agent: {destinations: [allowed]}
YAML
# State: the template cache's CA, master key and vault (copies), its templates (a link).
mkdir -m 700 "$CORDON_HOME" "$CORDON_HOME/audit"
cp -a "$tpl_state/ca" "$tpl_state/master.key" "$tpl_state/vault.db" "$CORDON_HOME/" || die "copy state"
ln -s "$(realpath "$tpl_state/templates")" "$CORDON_HOME/templates"
printf '%s' "$secret" | "$cordon" vault put gh-pat --stdin >/dev/null || die "vault put"
key=$("$cordon" apikey create --profile agent --note e2b-e2e 2>"$tmp/apikey.err") \
  || die "apikey create: $(cat "$tmp/apikey.err")"
# nsenter, not `ip netns exec`: that remounts /sys, which hides /sys/fs/cgroup from runsc.
nsenter --net=/run/netns/"$gw" "$cordon" serve --rules "$tmp/rules.yaml" \
  --transparent-listen 127.0.0.1:15001 --admin-listen 127.0.0.1:15002 --steering ebpf \
  --resolve api.allowed.test=198.51.100.10 --resolve api.denied.test=198.51.100.10 \
  --upstream-ca "$tmp/up-ca.pem" --no-system-trust --threads 2 --api-listen "$api" \
  2>>"$tmp/serve.log" &
serve_pid=$!
for _ in $(seq 150); do
  grep -q "cordon: E2B API on" "$tmp/serve.log" && break
  kill -0 "$serve_pid" 2>/dev/null || die "cordon serve exited"; sleep 0.2
done
grep -q "cordon: E2B API on" "$tmp/serve.log" || die "cordon serve: no E2B API after 30 s"

# ---- the SDK, from the gateway namespace ----------------------------------------------------------
# In the background with wait, so that INT/TERM reach the trap at once (nsenter, env and timeout
# exec each other: $! is timeout's pid, which hands a TERM on to node).
nsenter --net=/run/netns/"$gw" env -i PATH="$PATH" HOME="$tmp" \
  E2B_MODULE="$npm_cache/node_modules/e2b/dist/index.mjs" \
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
check "nothing left the sandboxes except through the gateway (leak counter $(leaked))" test "$(leaked)" = 0

echo "$passes passed, $failures failed"
if [ "$failures" -ne 0 ]; then
  echo "--- serve log (tail) ---"; tail -40 "$tmp/serve.log"
  exit 1
fi
