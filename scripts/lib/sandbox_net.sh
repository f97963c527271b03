# Sourced by scripts/demo.sh, bench/e2b/run.sh and the end-to-end scripts (tests/e2e/e2b,
# tests/e2e/sandbox): the hermetic topology of design.md §6, with no route to the machine's
# real interfaces, so that even broken enforcement cannot leak:
#   sandboxes (the pool POOL_CIDR, one netns each, made by the sandbox manager)
#     | veth per sandbox, the steering program on its host side
#   gateway netns GW: `cordon serve`, 198.51.100.1 on up0, IPv4 forwarding on
#     | veth up0 <-> down0
#   internet netns INET: 198.51.100.10 on down0, the fake upstream on :443 (its own test CA),
#     an nft counter of every packet that arrives from POOL_CIDR (a leak: the gateway never
#     sends from a sandbox address), a route back to POOL_CIDR and none anywhere else.
# Every function returns non-zero with a message on stderr when something fails. Callers set a
# trap that runs sn_teardown (it is safe to run twice, and after a partial set-up).
# State kept in globals: SN_GW, SN_INET, SN_CORDON, SN_SERVE_PID, SN_UPSTREAM_PID.
# shellcheck shell=bash
SN_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$SN_REPO/scripts/lib/test_pki.sh"

SN_GW="" SN_INET="" SN_CORDON="" SN_SERVE_PID="" SN_UPSTREAM_PID=""
SN_UPSTREAM_ADDR=198.51.100.10

# sn_net_up GW INET POOL_CIDR: the gateway and internet namespaces and the leak counter.
sn_net_up() {
  SN_GW=$1 SN_INET=$2
  local pool=$3
  ip netns add "$SN_GW" || return 1
  ip netns add "$SN_INET" || return 1
  ip -n "$SN_GW" link add up0 type veth peer name down0 netns "$SN_INET" || return 1
  ip -n "$SN_GW" addr add 198.51.100.1/24 dev up0 || return 1
  ip -n "$SN_INET" addr add "$SN_UPSTREAM_ADDR/24" dev down0 || return 1
  local l
  for l in "$SN_GW lo" "$SN_GW up0" "$SN_INET lo" "$SN_INET down0"; do
    set -- $l
    ip -n "$1" link set "$2" up || return 1
  done
  ip -n "$SN_INET" route add "$pool" via 198.51.100.1 || return 1
  ip netns exec "$SN_GW" sysctl -qw net.ipv4.ip_forward=1 || return 1
  ip netns exec "$SN_INET" nft -f - <<NFT || { echo "sandbox_net: nft leak counter" >&2; return 1; }
table inet sn_watch {
  counter from_sandbox {}
  chain in { type filter hook prerouting priority -300; policy accept;
    ip saddr $pool counter name from_sandbox
  }
}
NFT
}

# sn_leaked: packets from the sandbox pool that reached the fake internet (must stay 0).
sn_leaked() {
  ip netns exec "$SN_INET" nft list counter inet sn_watch from_sandbox |
    sed -n 's/.*packets \([0-9]*\).*/\1/p'
}

# sn_upstream_start BIN DIR CA_NAME HOST...: a certificate for HOST... signed by a fresh test CA
# (DIR/up-ca.pem) and cordon-fake-upstream on $SN_UPSTREAM_ADDR:443; every request it gets is
# one JSON line in DIR/upstream.jsonl.
sn_upstream_start() {
  local bin=$1 dir=$2 ca_name=$3
  shift 3
  make_upstream_cert "$dir" "$ca_name" "$@" || { echo "sandbox_net: upstream certificate" >&2; return 1; }
  ip netns exec "$SN_INET" "$bin" "$dir/up.pem" "$dir/up.key" "$SN_UPSTREAM_ADDR:443" \
    >"$dir/upstream.jsonl" 2>"$dir/upstream.log" &
  SN_UPSTREAM_PID=$!
  local _
  for _ in $(seq 50); do
    grep -q listening "$dir/upstream.log" 2>/dev/null && return 0
    kill -0 "$SN_UPSTREAM_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "sandbox_net: the fake upstream did not start: $(cat "$dir/upstream.log")" >&2
  return 1
}

# sn_serve_start CORDON LOG READY_REGEX TIMEOUT_S ARGS...: `cordon serve ARGS...` in the gateway
# namespace (stderr appended to LOG); returns once LOG matches READY_REGEX. The caller passes
# --rules and everything specific; the upstream CA of sn_upstream_start must be among ARGS.
# nsenter, not `ip netns exec`: that remounts /sys, which hides /sys/fs/cgroup from runsc.
sn_serve_start() {
  SN_CORDON=$1
  local log=$2 ready=$3 timeout=$4
  shift 4
  nsenter --net=/run/netns/"$SN_GW" "$SN_CORDON" serve "$@" 2>>"$log" &
  SN_SERVE_PID=$!
  local i
  for ((i = 0; i < timeout * 10; i++)); do
    grep -qE "$ready" "$log" 2>/dev/null && return 0
    kill -0 "$SN_SERVE_PID" 2>/dev/null || { echo "sandbox_net: cordon serve exited" >&2; return 1; }
    sleep 0.1
  done
  echo "sandbox_net: cordon serve not ready after $timeout s (no '$ready' in $log)" >&2
  return 1
}

# sn_in_gw CMD...: runs CMD in the gateway namespace (where serve's API and admin listen).
sn_in_gw() { nsenter --net=/run/netns/"$SN_GW" "$@"; }

# sn_e2b_sdk BUILD_DIR: makes sure the E2B JS SDK (e2b@2.51.0, from npm) is in
# BUILD_DIR/npm/e2b (tests/e2e/agent/ensure_sdk.sh, shared with the test suites) and prints the
# path of its ES module. Exit 77 when it cannot be had (no node/npm; reason on stderr).
sn_e2b_sdk() {
  local cache
  cache=$("$SN_REPO/tests/e2e/agent/ensure_sdk.sh" "$1/npm/e2b") || return $?
  echo "$cache/node_modules/e2b/dist/index.mjs"
}

# sn_base_template BUILD_DIR: prints the template state directory (CORDON_SBX_TEMPLATE_STATE,
# else BUILD_DIR/template-cache made by ensure_base.sh). For a test script: ends it SKIPPED when
# the machine cannot build templates (exit 77 of ensure_base.sh), failed when the build failed.
sn_base_template() {
  if [ -n "${CORDON_SBX_TEMPLATE_STATE:-}" ]; then
    echo "$CORDON_SBX_TEMPLATE_STATE"
    return 0
  fi
  local out rc
  out=$("$SN_REPO/tests/e2e/templates/ensure_base.sh" "$1")
  rc=$?
  [ "$rc" -eq 77 ] && { echo "SKIPPED: no base template (reason above)"; exit 0; }
  [ "$rc" -eq 0 ] || { echo "FAIL: building the base template failed (exit $rc, above)" >&2; exit 1; }
  echo "$out"
}

# sn_state_from_template TEMPLATE_STATE STATE: a fresh state directory STATE that serves the
# templates of TEMPLATE_STATE (tests/e2e/templates/ensure_base.sh): copies of its CA (the
# templates trust that root), master key and vault, and a link to its templates/.
sn_state_from_template() {
  local tpl=$1 state=$2
  [ -f "$tpl/ca/root.pem" ] && [ -d "$tpl/templates" ] ||
    { echo "sandbox_net: $tpl holds no CA or templates" >&2; return 1; }
  mkdir -m 700 "$state" "$state/audit" || return 1
  cp -a "$tpl/ca" "$tpl/master.key" "$tpl/vault.db" "$state/" || return 1
  ln -s "$(realpath "$tpl/templates")" "$state/templates"
}

# sn_sandbox_ids STATE: ids of the sandboxes the manager of STATE knows (running, paused, pooled).
sn_sandbox_ids() {
  [ -f "$1/sandboxes.db" ] && sqlite3 "$1/sandboxes.db" 'SELECT id FROM sandboxes' 2>/dev/null
  [ -d "$1/sandboxes" ] && ls "$1/sandboxes" 2>/dev/null
}

# sn_kill_sandboxes STATE: kills every sandbox of STATE through serve's manager while serve
# runs (a stopped serve leaves running sandboxes running; it removes only its pooled ones).
sn_kill_sandboxes() {
  local state=$1 s pids=()
  [ -n "$SN_SERVE_PID" ] && kill -0 "$SN_SERVE_PID" 2>/dev/null || return 0
  for s in $(sn_sandbox_ids "$state" | sort -u); do
    CORDON_HOME=$state "$SN_CORDON" sandbox kill "$s" >/dev/null 2>&1 &
    pids+=($!)
  done
  for s in "${pids[@]}"; do wait "$s" 2>/dev/null; done
  return 0
}

# sn_teardown [STATE]: stops serve (after killing STATE's sandboxes through it) and the fake
# upstream; then, as a backstop for a serve that died first, removes what the manager names
# after a sandbox id (namespace cdsb-HASH-ID and its processes, cgroups, mounts under STATE); then
# the two namespaces (deleting a namespace removes its veths, tc filters, rules and nft tables).
sn_teardown() {
  local state=${1:-} s p pid m ns
  [ -n "$state" ] && sn_kill_sandboxes "$state"
  for pid in $SN_SERVE_PID $SN_UPSTREAM_PID; do
    kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  SN_SERVE_PID="" SN_UPSTREAM_PID=""
  if [ -n "$state" ]; then
    # The manager names a sandbox's namespace and cgroups cdsb-<hash of the state dir>-<id>.
    for s in $(sn_sandbox_ids "$state" | sort -u); do
      for ns in /run/netns/cdsb-*-"$s"; do
        [ -e "$ns" ] || continue
        ns=${ns##*/}
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
      done
      find /sys/fs/cgroup -depth -type d -name "cdsb-*-$s*" -exec rmdir {} \; 2>/dev/null
    done
    # Innermost first; never delete through a mount (a template's rootfs is bind-mounted).
    for m in $(findmnt -rn -o TARGET | grep "^$(realpath -m "$state")/" | sort -r); do
      umount -l "$m" 2>/dev/null
    done
  fi
  for m in "$SN_GW" "$SN_INET"; do [ -n "$m" ] && ip netns del "$m" 2>/dev/null; done
  SN_GW="" SN_INET=""
  return 0
}
