#!/usr/bin/env bash
# Confined egress from a sandbox made by the sandbox manager (gVisor, the base template, the
# real agent), hermetic like confinement_e2e.sh:
#   sandbox (runsc in its netns, 10.200.x.2) | veth, steering program on the host side
#   gateway netns: `cordon serve --steering ebpf --transparent-listen ...` and the manager host
#     (cordon-test-sandbox-host: Manager + SteeringClientConfinement + control socket), forwarding ON
#   fake internet: cordon-fake-upstream on 198.51.100.10:443 (own CA), nft counters of leaks
#   (that topology is scripts/lib/sandbox_net.sh)
# Driven through the CLI: cordon sandbox create / exec / list / kill.
# Usage: sandbox_egress_e2e.sh CORDON FAKE_UPSTREAM SANDBOX_HOST BUILD_DIR
set -uo pipefail
cordon=$(realpath "$1"); upstream_bin=$(realpath "$2"); host_bin=$(realpath "$3"); build=$(realpath "$4")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../../scripts/lib/sandbox_net.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root"; exit 0; }
command -v runsc >/dev/null || { echo "SKIPPED: runsc is not installed"; exit 0; }
tpl_state=$(sn_base_template "$build") || exit 1
case $tpl_state in SKIPPED:*) echo "$tpl_state"; exit 0 ;; esac

id=$$
gw=cdt-se-gw-$id inet=cdt-se-in-$id prefix=cdtse$id-
tmp=$(mktemp -d /tmp/cordon-sbx-egress.XXXXXX)
export CORDON_HOME=$tmp/state
host_pid=""
failures=0
secret=ghp_EGRESS_SECRET_$id

cleanup() {
  set +e
  [ -n "$host_pid" ] && { kill -TERM "$host_pid"; wait "$host_pid"; }
  for n in $(ls /run/netns 2>/dev/null | grep "^$prefix"); do ip netns del "$n"; done
  sn_teardown
  rm -rf /etc/netns/"$prefix"*
  rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
check() { local name=$1; shift; if "$@"; then echo "PASS: $name"; else echo "FAIL: $name"; failures=$((failures + 1)); fi; }
die() { echo "FAIL: $*"; for f in serve host; do [ -f "$tmp/$f.log" ] && sed "s/^/  $f: /" "$tmp/$f.log" | tail -20; done; exit 1; }

# ---- topology (scripts/lib/sandbox_net.sh; the test host's pool is 10.200.0.0/16) -------------
sn_net_up "$gw" "$inet" 10.200.0.0/16 || die "topology"
sn_upstream_start "$upstream_bin" "$tmp" "egress e2e internet CA" api.allowed.test api.denied.test \
  || die "fake upstream"
cp "$SN_REPO/scripts/lib/agent_rules.yaml" "$tmp/rules.yaml" || die "rules"
"$cordon" init >"$tmp/init.log" 2>&1 || die "cordon init: $(cat "$tmp/init.log")"
printf '%s' "$secret" | "$cordon" vault put gh-pat --stdin >/dev/null || die "vault put"
"$cordon" ca export >"$tmp/root.pem"
sn_serve_start "$cordon" "$tmp/serve.log" "cordon: steering" 10 --rules "$tmp/rules.yaml" \
  --transparent-listen 127.0.0.1:15001 --admin-listen 127.0.0.1:15002 --steering ebpf \
  --resolve api.allowed.test=198.51.100.10 --resolve api.denied.test=198.51.100.10 \
  --upstream-ca "$tmp/up-ca.pem" --no-system-trust --threads 2 || die "cordon serve"
for _ in $(seq 50); do [ -S "$CORDON_HOME/steering.sock" ] && break; sleep 0.1; done
if [ ! -S "$CORDON_HOME/sandbox.sock" ]; then
  check "no sandbox manager running: the CLI says to start cordon serve" \
    bash -c "'$cordon' sandbox create --profile agent 2>&1 | grep -q 'start .cordon serve'"
fi
CORDON_HOST_CANARY=host-canary-$id "$host_bin" "$CORDON_HOME" "$gw" "$tpl_state" "$prefix" \
  2>"$tmp/host.log" &
host_pid=$!
for _ in $(seq 100); do grep -q ready "$tmp/host.log" && break; kill -0 "$host_pid" || die "host exited"; sleep 0.1; done
echo "host-only-file" >"$tmp/host-canary-file"

# ---- a sandbox made by the manager ---------------------------------------------------------------
sbx=$("$cordon" sandbox create --profile agent --env "CA_PEM=$(cat "$tmp/root.pem")" 2>"$tmp/create.err") \
  || die "sandbox create: $(cat "$tmp/create.err")"
check "create printed a 20-char id" bash -c "[[ '$sbx' =~ ^[a-z0-9]{20}$ ]]"
check "the sandbox is listed" bash -c "'$cordon' sandbox list | grep -q '$sbx'"
x() { "$cordon" sandbox exec --user root "$sbx" -- /bin/sh -c "$1"; }
x 'printf "%s\n" "$CA_PEM" > /tmp/ca.pem' || die "exec"
curl_sb() { x "curl -sS -o /dev/null -w '%{http_code}' --max-time 5 --cacert /tmp/ca.pem $* 2>/dev/null"; }
check "curl https://api.allowed.test through the gateway: 200" test "$(curl_sb https://api.allowed.test/hello)" = 200
check "  ... the upstream got the injected credential" grep -q "Bearer $secret" "$tmp/upstream.jsonl"
check "  ... which is not in the sandbox's environment" test -z "$(x 'env; cat /proc/1/environ' | grep -a "$secret")"
check "  ... nor in its files" test "$(x "grep -rls '$secret' /etc /root /tmp /home /var /usr/local 2>/dev/null | head -1")" = ""
check "a denied host fails" test "$(curl_sb https://api.denied.test/)" = 000
ip_code=$(curl_sb -k https://198.51.100.10/)
check "an IP literal fails (got $ip_code)" test "$ip_code" = 000
x 'printf quic >/dev/udp/198.51.100.10/443; printf dns >/dev/udp/198.51.100.10/5353' 2>/dev/null
x 'ping -c1 -W2 198.51.100.10 >/dev/null 2>&1; python3 -c "
import socket
try:
  s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP); s.sendto(b\"\\x08\\0\\0\\0\\0\\1\\0\\1\", (\"198.51.100.10\", 0))
except OSError: pass"' 2>/dev/null
check "UDP and ICMP never reached the fake internet (no packet from the sandbox at all)" test "$(sn_leaked)" = 0
gw_addr=$(x "ip route 2>/dev/null | sed -n 's/default via \([0-9.]*\).*/\1/p'; awk '/nameserver/{print \$2; exit}' /etc/resolv.conf" | tail -1)
check "the gateway is not reachable on 49983 or its admin port" \
  test "$(x "for p in 49983 15002 22; do curl -s -o /dev/null -w '%{http_code} ' --max-time 3 http://$gw_addr:\$p/; done")" = "000 000 000 "
check "no host environment variable inside" test -z "$(x 'env; cat /proc/1/environ' | grep -a CANARY)"
check "no host path inside" test "$(x "test -e $tmp/host-canary-file && echo visible || echo absent")" = absent
check "the state directory is not inside" test "$(x "test -e $CORDON_HOME && echo visible || echo absent")" = absent
"$cordon" sandbox exec "$sbx" -- /bin/sh -c 'exit 5'
check "exec exits with the command's exit code" test $? = 5
"$cordon" sandbox kill "$sbx" 2>/dev/null
check "killed: not listed" bash -c "! '$cordon' sandbox list | grep -q '$sbx'"
check "killed: registration gone" bash -c "! '$cordon' sandbox list --registrations | grep -q '$sbx'"
check "killed: namespace gone" bash -c "! ls /run/netns | grep -q '$prefix'"
check "nothing leaked at any point" test "$(sn_leaked)" = 0
if [ "$failures" -ne 0 ]; then
  echo "FAILED: $failures check(s)"; tail -20 "$tmp/serve.log"; tail -20 "$tmp/host.log"; exit 1
fi
echo "all sandbox egress checks passed"
