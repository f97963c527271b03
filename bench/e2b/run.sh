#!/usr/bin/env bash
# The E2B SDK's Sandbox.create() -> commands.run('echo hi') -> kill() against `cordon serve
# --api-listen --warm-pool base=N` (gVisor), p50/p99 at concurrency 1 and N, side by side in one
# run with the SDK's commands.run against an existing sandbox (the agent round trip alone) and
# `runsc run` of the same template's rootfs directly; prints one table with ratios and goals.
# Root; runsc, node, the `base` template (tests/e2e/templates/ensure_base.sh BUILD_DIR) and the
# SDK (BUILD_DIR/npm/e2b). The topology is scripts/lib/sandbox_net.sh (namespaces of its own,
# a fake internet with no route out); everything is removed at the end, also on failure.
#   bench/e2b/run.sh BUILD_DIR [ROUNDS] [CONCURRENCY] [ROUNDS_AT_CONCURRENCY]   (30 50 3)
# RUNS (default 20): agent-only round trips per sandbox at concurrency 1 (RUNS/5 at N).
set -uo pipefail
build=$(realpath "${1:?usage: run.sh BUILD_DIR [ROUNDS] [CONCURRENCY] [ROUNDS_AT_CONCURRENCY]}")
rounds=${2:-30} conc=${3:-50} rounds_n=${4:-3}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/lib/sandbox_net.sh"
cordon=$build/cli/cordon
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root"; exit 77; }
for t in runsc node sqlite3 nsenter; do
  command -v "$t" >/dev/null || { echo "SKIPPED: $t is not installed"; exit 77; }
done
tpl_state=${CORDON_SBX_TEMPLATE_STATE:-$("$here/../../tests/e2e/templates/ensure_base.sh" "$build")} ||
  { echo "SKIPPED: no base template"; exit 77; }
e2b_module=$(sn_e2b_sdk "$build") || { echo "SKIPPED: no E2B SDK"; exit 77; }
rootfs=$(readlink -f "$tpl_state/templates/aliases/base")/rootfs
[ -x "$rootfs/bin/echo" ] || { echo "$rootfs is not a rootfs"; exit 1; }

tmp=$(mktemp -d /tmp/cordon-e2b-bench.XXXXXX)
state=$tmp/state
direct_ns=cdt-e2bb-$$-
cleanup() {
  set +e
  sn_teardown "$state"
  local c
  for c in $(runsc --root "$tmp/runsc" list -q 2>/dev/null); do  # an interrupted `runsc run`
    runsc --root "$tmp/runsc" kill "$c" KILL; runsc --root "$tmp/runsc" delete --force "$c"
  done 2>/dev/null
  for n in $(ls /run/netns 2>/dev/null | grep "^$direct_ns"); do ip netns del "$n"; done
  rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; runsc $(runsc --version 2>/dev/null | head -1)"

# ---- runsc run of the same rootfs, each in a fresh netns (as bench/sandbox), no agent -----------
# Read-only rootfs + a memory overlay, the network stack on (a netns of its own), /bin/echo hi;
# timed from `runsc run` to its exit with the output read. The namespaces are made before the
# clock starts and removed after it stops.
mkdir -p "$tmp/bundle" "$tmp/runsc"
cat >"$tmp/bundle/config.json" <<EOF
{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["/bin/echo","hi"],
 "env":["PATH=/usr/bin:/bin"],"cwd":"/"},"root":{"path":"$rootfs","readonly":true},
 "hostname":"bench","mounts":[{"destination":"/proc","type":"proc","source":"proc"}],
 "linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/NETNS"},{"type":"mount"}]}}
EOF
runsc_once() {  # runsc_once NAME: prints the milliseconds of one run, or "fail"
  local name=$1 b=$tmp/b-$1 t0 t1 out
  mkdir -p "$b" && sed "s|NETNS|$direct_ns$name|" "$tmp/bundle/config.json" >"$b/config.json"
  t0=$(date +%s%N)
  # runsc 20221219 takes any netns with /proc/sys/net for the root one (network-facts.md).
  out=$(unshare -m --propagation private sh -c "mount -t tmpfs -o ro,size=4k tmpfs /proc/sys/net &&
    exec runsc --root $tmp/runsc --platform=ptrace --network=sandbox --overlay2=root:memory \
      run --bundle $b d$name" 2>"$b/err" </dev/null)
  t1=$(date +%s%N)
  if [ "$out" = hi ]; then echo $(((t1 - t0) / 1000)); else echo fail; fi
}
runsc_round() {  # runsc_round N TAG: N at once; one figure (microseconds) per line
  local n=$1 tag=$2 i pids=()
  for ((i = 0; i < n; i++)); do ip netns add "$direct_ns$tag$i"; done
  for ((i = 0; i < n; i++)); do runsc_once "$tag$i" >"$tmp/r-$tag$i" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p"; done
  for ((i = 0; i < n; i++)); do cat "$tmp/r-$tag$i"; ip netns del "$direct_ns$tag$i"; done
}
runsc_round 1 warm >/dev/null  # page cache
: >"$tmp/runsc-c1"; : >"$tmp/runsc-cN"
for ((r = 0; r < rounds; r++)); do runsc_round 1 "a$r" >>"$tmp/runsc-c1"; done
for ((r = 0; r < rounds_n; r++)); do runsc_round "$conc" "n$r" >>"$tmp/runsc-cN"; done
to_json() { grep -v fail "$1" | awk '{printf "%s%.3f", (NR > 1 ? "," : ""), $1 / 1000}'; }
failed=$(cat "$tmp/runsc-c1" "$tmp/runsc-cN" | grep -c fail)
printf '{"c1":[%s],"cN":[%s],"failed":%s}\n' "$(to_json "$tmp/runsc-c1")" "$(to_json "$tmp/runsc-cN")" \
  "$failed" >"$tmp/runsc.json"
echo "runsc run: $(grep -vc fail "$tmp/runsc-c1") + $(grep -vc fail "$tmp/runsc-cN") runs, $failed failed"
[ "$failed" = 0 ] || sed 's/^/  runsc: /' "$tmp"/b-*/err | sort | uniq -c | sort -rn | head -5

# ---- cordon serve with a warm pool, the SDK in the gateway namespace ------------------------------
sn_net_up "cdt-e2bb-gw-$$" "cdt-e2bb-in-$$" 10.201.0.0/16 || exit 1
sn_upstream_start "$build/tests/tools/fake_upstream/cordon-fake-upstream" "$tmp" "bench CA" \
  api.allowed.test || exit 1
cat >"$tmp/rules.yaml" <<'YAML'
version: 1
destinations:
  - id: allowed
    hosts: [api.allowed.test]
    routes:
      - {id: get, methods: [GET]}
profiles:
  bench: {destinations: [allowed]}
YAML
sn_state_from_template "$tpl_state" "$state" || exit 1
export CORDON_HOME=$state
key=$("$cordon" apikey create --profile bench --note e2b-bench) || exit 1
api=127.0.0.1:13100
sn_serve_start "$cordon" "$tmp/serve.log" "cordon: E2B API on" 30 --rules "$tmp/rules.yaml" \
  --transparent-listen 127.0.0.1:15001 --admin-listen 127.0.0.1:15002 --steering ebpf \
  --upstream-ca "$tmp/up-ca.pem" --no-system-trust --threads 2 --api-listen "$api" \
  --warm-pool "base=$conc" --max-sandboxes $((2 * conc + 8)) || { tail "$tmp/serve.log"; exit 1; }
sn_in_gw env -i PATH="$PATH" HOME="$tmp" E2B_MODULE="$e2b_module" E2B_API_URL="http://$api" \
  E2B_SANDBOX_URL="http://$api" E2B_API_KEY="$key" POOL_DB="$state/sandboxes.db" POOL_SIZE="$conc" \
  ROUNDS="$rounds" ROUNDS_N="$rounds_n" CONC="$conc" RUNS="${RUNS:-20}" RUNSC_JSON="$tmp/runsc.json" \
  node "$here/e2b_bench.mjs" | tee "$tmp/bench.out"
rc=${PIPESTATUS[0]}
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$rc" = 0 ] || { echo "--- serve log (tail)"; tail -n 20 "$tmp/serve.log"; }
exit "$rc"
