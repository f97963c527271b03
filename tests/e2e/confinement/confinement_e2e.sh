#!/usr/bin/env bash
# End-to-end network confinement (issue 5, design.md §2 and §6), hermetic: every packet stays in
# namespaces made here.
#   sandbox (made by `cordon sandbox netns create`, 10.200.x.2)
#     | veth; the host side carries the steering program, in the gateway namespace
#   gateway namespace: `cordon serve --steering ebpf` (IP forwarding ON, so that broken
#     | enforcement WOULD leak), 198.51.100.1
#   fake internet: a TLS upstream (cordon-fake-upstream, its own CA) on 198.51.100.10:443 and
#     listeners on :22 and :8443, a fake resolver address, no route anywhere else; nft counters
#     count every packet arriving from the sandbox pool and every DNS packet.
# Checks the issue's "Tests" list. Root only; prints SKIPPED (and exits 0) otherwise.
# Usage: confinement_e2e.sh PATH/TO/cordon PATH/TO/cordon-fake-upstream
set -uo pipefail
cordon=$(realpath "${1:?usage: confinement_e2e.sh CORDON FAKE_UPSTREAM}")
upstream_bin=$(realpath "${2:?usage: confinement_e2e.sh CORDON FAKE_UPSTREAM}")
. "$(dirname "$0")/../../../scripts/lib/test_pki.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root (namespaces, BPF, tc)"; exit 0; }
for t in ip nft curl openssl dig python3; do
  command -v "$t" >/dev/null || { echo "SKIPPED: $t is not installed"; exit 0; }
done

id=$$
gw=cdt-cf-gw-$id inet=cdt-cf-in-$id sb=cdt-cf-sb-$id
tmp=$(mktemp -d /tmp/cordon-confine-e2e.XXXXXX)
serve_pid="" upstream_pid=""
export CORDON_HOME=$tmp/state
failures=0

cleanup() {
  set +e
  for pid in $serve_pid $upstream_pid; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  for n in $(ls /run/netns 2>/dev/null | grep "^cdt-cf-sb-$id\|^cdt-cf-m-$id-"); do
    "$cordon" sandbox netns delete "$n" --gateway-netns "$gw" >/dev/null 2>&1
  done
  for ns in "$gw" "$inet"; do ip netns del "$ns" 2>/dev/null; done
  for n in $(ls /run/netns 2>/dev/null | grep "^cdt-cf-sb-$id\|^cdt-cf-m-$id-"); do ip netns del "$n"; done
  rm -rf /etc/netns/cdt-cf-*-"$id"* "$tmp"
}
trap cleanup EXIT

check() {  # check NAME COMMAND...: runs the command, records PASS/FAIL
  local name=$1; shift
  if "$@"; then echo "PASS: $name"; else echo "FAIL: $name"; failures=$((failures + 1)); fi
}
die() {
  echo "FAIL: $*"
  [ -f "$tmp/serve.log" ] && sed 's/^/  serve: /' "$tmp/serve.log"
  exit 1
}
in_sb() { ip netns exec "$sb" env -i PATH="$PATH" "$@"; }
audit_has() {  # audit_has PATTERN...: waits up to 3 s for a line matching every pattern
  local i line
  for i in $(seq 30); do
    line=$(cat "$CORDON_HOME"/audit/*.jsonl 2>/dev/null)
    for p in "$@"; do line=$(grep -F -- "$p" <<<"$line"); done
    [ -n "$line" ] && return 0
    sleep 0.1
  done
  echo "  (no audit line with: $*)"; return 1
}
leaked() {  # packets from the sandbox pool that reached the fake internet
  ip netns exec "$inet" nft list counter inet cf_watch from_sandbox | sed -n 's/.*packets \([0-9]*\).*/\1/p'
}
dns_seen() {  # DNS packets that reached the fake internet
  ip netns exec "$inet" nft list counter inet cf_watch dns | sed -n 's/.*packets \([0-9]*\).*/\1/p'
}
counter() {  # counter NAME: the steering counter of the sandbox's interface
  "$cordon" sandbox netns list | python3 -c "
import json, sys
j = json.load(sys.stdin)
print(sum(i.get('counters', {}).get('$1', 0) for i in j['interfaces'] if i['sandbox'] == '$sb'))"
}
start_serve() {
  ip netns exec "$gw" "$cordon" serve --rules "$tmp/rules.yaml" \
    --transparent-listen 127.0.0.1:15001 --admin-listen 127.0.0.1:15002 --steering ebpf \
    --resolve api.allowed.test=198.51.100.10 --resolve api.denied.test=198.51.100.10 \
    --upstream-ca "$tmp/up-ca.pem" --no-system-trust --threads 2 2>>"$tmp/serve.log" &
  serve_pid=$!
  for _ in $(seq 100); do
    [ -S "$CORDON_HOME/steering.sock" ] && grep -q "cordon: steering" "$tmp/serve.log" && return 0
    kill -0 "$serve_pid" 2>/dev/null || die "cordon serve exited"
    sleep 0.1
  done
  die "cordon serve did not start"
}
stop_serve() { kill -TERM "$serve_pid"; wait "$serve_pid"; serve_pid=""; }

# ---- topology ----------------------------------------------------------------------------------
ip netns add "$gw" && ip netns add "$inet" || die "ip netns add"
ip -n "$gw" link add up0 type veth peer name down0 netns "$inet"
ip -n "$gw" addr add 198.51.100.1/24 dev up0
ip -n "$inet" addr add 198.51.100.10/24 dev down0
ip -n "$inet" addr add 192.0.2.53/32 dev lo
ip -n "$gw" -6 addr add 2001:db8:100::1/64 dev up0 nodad
ip -n "$inet" -6 addr add 2001:db8:100::10/64 dev down0 nodad
for l in "$gw lo" "$gw up0" "$inet lo" "$inet down0"; do set -- $l; ip -n "$1" link set "$2" up; done
ip -n "$gw" route add 192.0.2.0/24 via 198.51.100.10
ip -n "$inet" route add 10.200.0.0/16 via 198.51.100.1
ip -n "$inet" -6 route add fd63:6f72:646e::/48 via 2001:db8:100::1
ip netns exec "$gw" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
ip netns exec "$inet" nft -f - <<'NFT' || die "nft watch"
table inet cf_watch {
  counter from_sandbox {}
  counter dns {}
  chain in { type filter hook prerouting priority -300; policy accept;
    ip saddr 10.200.0.0/16 counter name from_sandbox
    ip6 saddr fd63:6f72:646e::/48 counter name from_sandbox
    meta l4proto { tcp, udp } th dport 53 counter name dns
  }
}
NFT
# Listeners in the fake internet that would answer anything that leaked.
ip netns exec "$inet" python3 - >/dev/null 2>&1 <<'PY' &
import socket, threading, time
def serve_tcp(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.sendall(b"LEAKED\n"); c.close()
def serve_udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", port))
    while True:
        d, a = s.recvfrom(2048); s.sendto(d[:2] + b"\x81\x80" + d[4:], a)  # "answers" anything
for p in (22, 8443): threading.Thread(target=serve_tcp, args=(p,), daemon=True).start()
for p in (53, 443): threading.Thread(target=serve_udp, args=(p,), daemon=True).start()
time.sleep(3600)
PY
upstream_pid="$upstream_pid $!"

make_upstream_cert "$tmp" "e2e internet CA" api.allowed.test api.denied.test || die "cannot make the fake internet's certificate"
ip netns exec "$inet" "$upstream_bin" "$tmp/up.pem" "$tmp/up.key" 198.51.100.10:443 \
  >"$tmp/upstream.jsonl" 2>"$tmp/upstream.log" &
upstream_pid="$upstream_pid $!"
for _ in $(seq 50); do grep -q listening "$tmp/upstream.log" 2>/dev/null && break; sleep 0.1; done

cat >"$tmp/rules.yaml" <<'YAML'
version: 1
dns: {unlisted: nxdomain}
destinations:
  - id: allowed
    hosts: [api.allowed.test, "*.tunnel.allowed.test"]
    routes:
      - {id: get, methods: [GET]}
profiles:
  agent: {destinations: [allowed]}
YAML
"$cordon" init >"$tmp/init.log" 2>&1 || die "cordon init: $(cat "$tmp/init.log")"
"$cordon" ca export >"$tmp/root.pem"
start_serve
"$cordon" sandbox netns create "$sb" --profile agent --gateway-netns "$gw" >"$tmp/sb.json" \
  2>"$tmp/sb.err" || die "sandbox netns create: $(cat "$tmp/sb.err")"
host_if=$(sed -n 's/.*"host_interface":"\([^"]*\)".*/\1/p' "$tmp/sb.json")
gw_addr=$(sed -n 's/.*"gateway":"\([0-9.]*\)".*/\1/p' "$tmp/sb.json")

# ---- HTTPS through the gateway, no proxy settings --------------------------------------------
curl_sb() { in_sb curl -sS -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$tmp/root.pem" "$@" 2>/dev/null; }
check "curl to an allowed name works with no proxy settings" \
  test "$(curl_sb https://api.allowed.test/hello)" = 200
check "the upstream saw the request from the gateway" grep -q '"path":"/hello"' "$tmp/upstream.jsonl"
check "curl to a denied name fails (NXDOMAIN)" test "$(curl_sb https://api.denied.test/)" = 000
check "  ... and at a hard-coded address, refused at the SNI" \
  test "$(curl_sb --resolve api.denied.test:443:198.51.100.10 https://api.denied.test/)" = 000
check "  ... and the audit says why" audit_has '"no_destination"' "$sb"

# ---- DNS ---------------------------------------------------------------------------------------
dig_sb() { in_sb dig +tries=1 +time=3 "$@" | sed -n 's/.*status: \([A-Z]*\),.*/\1/p'; }
check "an allowed name resolves to the synthetic address" \
  test "$(in_sb dig +short +tries=1 +time=3 api.allowed.test A)" = 198.18.0.1
check "AAAA of an allowed name: exists, no address (NODATA)" test "$(dig_sb api.allowed.test AAAA)" = NOERROR
check "dig of an unlisted name: NXDOMAIN" test "$(dig_sb unlisted.example A)" = NXDOMAIN
check "  ... audited" audit_has '"dns_unlisted"' 'unlisted.example'
check "TXT refused" test "$(dig_sb api.allowed.test TXT)" = REFUSED
check "ANY refused" test "$(dig_sb api.allowed.test ANY)" = REFUSED
check "a name under an allowed wildcard works" test "$(dig_sb x.tunnel.allowed.test A)" = NOERROR
check "long random labels under an allowed parent: REFUSED" \
  test "$(dig_sb 4e6f7468696e67546f536565486572653132.tunnel.allowed.test A)" = REFUSED
check "  ... audited as tunnelling" audit_has '"dns_tunnel_shape"'
check "DNS over TCP works the same" test "$(dig_sb +tcp unlisted.example A)" = NXDOMAIN
check "UDP 53 to an outside resolver is answered by the gateway (NXDOMAIN), not the resolver" \
  test "$(dig_sb @192.0.2.53 unlisted.example A)" = NXDOMAIN
check "TCP 53 to an outside resolver too" test "$(dig_sb +tcp @192.0.2.53 unlisted.example A)" = NXDOMAIN

# ---- everything else: dropped, counted, audited -------------------------------------------------
before=$(counter drop_tcp_port)
check "TCP 22 to the fake internet fails" \
  test "$(in_sb timeout 4 bash -c 'exec 3<>/dev/tcp/198.51.100.10/22 && echo open' 2>/dev/null)" = ""
check "TCP 8443 fails" test "$(curl_sb -k https://198.51.100.10:8443/)" = 000
check "  ... counted (drop_tcp_port)" test "$(counter drop_tcp_port)" -gt "$before"
check "  ... audited (egress_dropped, port 22)" audit_has '"egress_dropped"' '"port":22' '"drop_tcp_port"' "$sb"
check "  ... audited (egress_dropped, port 8443)" audit_has '"egress_dropped"' '"port":8443'
in_sb bash -c 'printf quic >/dev/udp/198.51.100.10/443' 2>/dev/null
check "UDP 443 (QUIC) dropped, counted" test "$(counter drop_udp_port)" -gt 0
check "  ... audited" audit_has '"egress_dropped"' '"protocol":"udp"' '"port":443'
in_sb python3 -c '
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
p = bytearray(struct.pack("!BBHHH", 8, 0, 0, 1, 1)); c = ~sum(struct.unpack("!4H", p)) & 0xffff
p[2:4] = struct.pack("!H", c); s.sendto(bytes(p), ("198.51.100.10", 0))'
check "ICMP dropped, counted" test "$(counter drop_icmp)" -gt 0
check "  ... audited" audit_has '"egress_dropped"' '"protocol":"icmp"'
check "IPv6 TCP 22 dropped" \
  test "$(in_sb timeout 4 bash -c 'exec 3<>/dev/tcp/2001:db8:100::10/22 && echo open' 2>/dev/null)" = ""
check "  ... audited" audit_has '"egress_dropped"' '2001:db8:100::10'
check "IPv6 HTTPS does not get out either" \
  test "$(curl_sb -k 'https://[2001:db8:100::10]/')" = 000
check "the fake internet saw no packet from the sandbox pool" test "$(leaked)" = 0
check "the fake internet saw no DNS packet at all" test "$(dns_seen)" = 0

# ---- the gateway's own services --------------------------------------------------------------
check "admin/metrics unreachable from the sandbox (gateway address)" \
  test "$(in_sb curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://$gw_addr:15002/metrics")" = 000
check "admin/metrics unreachable from the sandbox (loopback is the sandbox's own)" \
  test "$(in_sb curl -s -o /dev/null -w '%{http_code}' --max-time 3 http://127.0.0.1:15002/metrics)" = 000
check "admin reachable from the gateway namespace itself (the test is meaningful)" \
  test "$(ip netns exec "$gw" curl -s -o /dev/null -w '%{http_code}' --max-time 3 http://127.0.0.1:15002/metrics)" = 200
check "ssh on the gateway address unreachable" \
  test "$(in_sb timeout 4 bash -c "exec 3<>/dev/tcp/$gw_addr/22 && echo open" 2>/dev/null)" = ""
check "the steering control socket is unix-only, 0600" \
  test "$(stat -c %a "$CORDON_HOME/steering.sock")" = 600

# ---- fail closed -----------------------------------------------------------------------------
stop_serve
check "gateway stopped: the program stays on the interface" \
  bash -c "ip netns exec $gw tc filter show dev $host_if ingress | grep -q cordon_steer"
check "gateway stopped: new connections fail" test "$(curl_sb https://api.allowed.test/hello)" = 000
check "gateway stopped: a literal address fails too" \
  test "$(curl_sb --resolve api.allowed.test:443:198.51.100.10 https://api.allowed.test/hello)" = 000
check "gateway stopped: nothing leaked" test "$(leaked)" = 0
start_serve
check "gateway restarted: the interface is re-attached" grep -q "1 interfaces re-attached" "$tmp/serve.log"
check "gateway restarted: service is back" test "$(curl_sb https://api.allowed.test/hello)" = 200
"$cordon" sandbox netns delete "$sb" --gateway-netns "$gw" >/dev/null 2>&1
check "sandbox deleted: namespace gone" test ! -e "/run/netns/$sb"
check "sandbox deleted: registration gone" bash -c "! '$cordon' sandbox list --registrations | grep -q '$sb'"

# ---- 100 sandboxes ---------------------------------------------------------------------------
made=0
for i in $(seq 100); do
  "$cordon" sandbox netns create "cdt-cf-m-$id-$i" --profile agent --gateway-netns "$gw" --no-ipv6 \
    >/dev/null 2>>"$tmp/many.err" && made=$((made + 1))
done
check "100 sandboxes created and attached" test "$made" = 100
check "  ... 100 interfaces confined" \
  test "$("$cordon" sandbox netns list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["interfaces"]))')" = 100
for i in $(seq 100); do
  "$cordon" sandbox netns delete "cdt-cf-m-$id-$i" --gateway-netns "$gw" >/dev/null 2>>"$tmp/many.err"
done
stop_serve
check "after 100 attach/detach: no cordon filter left" \
  bash -c "! ip netns exec $gw bash -c 'for d in \$(ls /sys/class/net); do tc filter show dev \$d ingress; done' | grep -q cordon"
check "  ... no sandbox interface left" bash -c "! ip -n $gw -o link | grep -q ' cdh'"
check "  ... no fwmark rule left" bash -c "! ip -n $gw rule | grep -q fwmark"
check "  ... no route in table 100" test -z "$(ip -n "$gw" route show table 100 2>/dev/null)"
check "  ... no namespace left" bash -c "! ls /run/netns | grep -q 'cdt-cf-m-$id-'"
check "  ... no registration left" bash -c "! '$cordon' sandbox list --registrations | grep -q 'cdt-cf-m-$id-'"
check "  ... steering state empty" test "$(tr -d ' \n' <"$CORDON_HOME/steering.json")" = "[]"
check "the audit chain verifies" "$cordon" audit verify

if [ "$failures" -ne 0 ]; then
  echo "FAILED: $failures check(s)"; sed 's/^/  serve: /' "$tmp/serve.log" | tail -20
  grep -v '^created sandbox\|^deleted sandbox' "$tmp/many.err" | head -5
  exit 1
fi
echo "all confinement checks passed"
