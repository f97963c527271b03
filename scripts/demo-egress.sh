#!/usr/bin/env bash
# Step 6 of the main-job demo (scripts/demo.sh): the egress story, on this machine, with no
# internet (design.md §6: never a packet toward the real network). Three network namespaces,
# none with a route to the machine's interfaces:
#   sandbox 10.200.x.2 --veth--  gateway 10.200.x.1 | 198.51.100.1  --veth--  internet 198.51.100.10
# The "internet" holds a fake TLS upstream (its own test CA, made here with openssl) playing
# api.github.com and api.anthropic.com; the gateway namespace runs `cordon serve --steering
# auto` (the tc eBPF program with bpf_sk_assign, or the nftables TPROXY fallback where the
# kernel lacks it), and the sandbox is made by `cordon sandbox netns create`. The sandbox runs
# scripts/demo/agent.sh: plain curl with no proxy settings and no secrets, names resolved by the
# gateway's DNS responder. Then it shows the audit log and verifies its chain.
# Exits non-zero when an expectation fails; removes everything it made, also on failure.
# Usage (root): scripts/demo-egress.sh PATH/TO/cordon [PATH/TO/cordon-fake-upstream]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/test_pki.sh"
cordon=$(realpath "${1:?usage: demo-egress.sh PATH/TO/cordon [PATH/TO/cordon-fake-upstream]}")
upstream_bin=${2:-$(dirname "$cordon")/../tests/tools/fake_upstream/cordon-fake-upstream}
[ -x "$upstream_bin" ] || { echo "demo-egress: no fake upstream at $upstream_bin (build target cordon-fake-upstream)" >&2; exit 1; }
upstream_bin=$(realpath "$upstream_bin")
[ "$(id -u)" -eq 0 ] || { echo "demo-egress: needs root (network namespaces, nftables)" >&2; exit 1; }
for t in ip nft curl openssl getent dig; do
  command -v "$t" >/dev/null || { echo "demo-egress: $t is not installed (scripts/install-deps.sh)" >&2; exit 1; }
done

id=$$
sb=cdemo-sb-$id gw=cdemo-gw-$id inet=cdemo-in-$id
tmp=$(mktemp -d /tmp/cordon-demo-egress.XXXXXX)
serve_pid="" upstream_pid=""
cleanup() {
  local rc=$?
  set +e  # clean up everything even if one step fails
  for pid in $serve_pid $upstream_pid; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  # The sandbox first (its veth and program live in the gateway namespace), then the rest:
  # deleting a namespace removes its veths, tc filters, rules and nft tables with it.
  "$cordon" sandbox netns delete "$sb" --gateway-netns "$gw" >/dev/null 2>&1
  for ns in "$sb" "$gw" "$inet"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "/etc/netns/$sb" "$tmp"
  rmdir /etc/netns 2>/dev/null  # only if the demo left it empty
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bold() { printf '\n\033[1m-- %s\033[0m\n' "$*"; }
ok() { printf '   ok: %s\n' "$*"; }
die() {
  printf '   FAILED: %s\n' "$*" >&2
  if [ -f "$tmp/serve.log" ]; then echo "   (gateway log:)" >&2; sed 's/^/     /' "$tmp/serve.log" >&2; fi
  if [ -s "$tmp/agent/stderr" ]; then echo "   (agent stderr, last lines:)" >&2; tail -n 5 "$tmp/agent/stderr" | sed 's/^/     /' >&2; fi
  "$cordon" sandbox netns list 2>/dev/null | grep -o '"[a-z_]*":[1-9][0-9]*' | sed 's/^/     counter /' >&2
  exit 1
}

export CORDON_HOME=$tmp/state
pat=ghp_demo_REAL_github_pat_0123456789
model_key=sk-ant-demo-REAL-model-key-9876543210

bold "6a. A fake internet: gateway and internet namespaces, no route out, a TLS upstream with its own CA"
ip netns add "$gw"; ip netns add "$inet"
ip -n "$gw" link add v-gw-in type veth peer name v-in netns "$inet"
ip -n "$gw" addr add 198.51.100.1/24 dev v-gw-in
ip -n "$inet" addr add 198.51.100.10/24 dev v-in
for l in "$gw lo" "$gw v-gw-in" "$inet lo" "$inet v-in"; do
  set -- $l; ip -n "$1" link set "$2" up
done
echo "   gateway $gw (198.51.100.1) -> internet $inet (198.51.100.10)"

make_upstream_cert "$tmp" "demo internet CA" api.github.com api.anthropic.com || die "cannot make the fake internet's certificate"
ip netns exec "$inet" "$upstream_bin" "$tmp/up.pem" "$tmp/up.key" 198.51.100.10:443 \
  >"$tmp/upstream.jsonl" 2>"$tmp/upstream.log" &
upstream_pid=$!
for _ in $(seq 50); do grep -q listening "$tmp/upstream.log" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$tmp/upstream.log" || die "fake upstream did not start: $(cat "$tmp/upstream.log")"
echo "   fake upstream for api.github.com + api.anthropic.com on 198.51.100.10:443 (test CA $tmp/up-ca.pem)"

bold "6b. The gateway: state, secrets in the vault, a sandbox, a proxy token, cordon serve"
"$cordon" init >"$tmp/init.log" 2>&1 || die "cordon init: $(cat "$tmp/init.log")"
printf '%s' "$pat" | "$cordon" vault put github-pat --stdin >/dev/null 2>&1 || die "vault put github-pat"
printf '%s' "$model_key" | "$cordon" vault put anthropic-api-key --stdin >/dev/null 2>&1 || die "vault put anthropic-api-key"
"$cordon" ca export >"$tmp/gateway-root.pem"
ip netns exec "$gw" "$cordon" serve --rules "$here/demo/rules.yaml" \
  --transparent-listen 127.0.0.1:15001 --admin-listen 127.0.0.1:15002 --steering auto \
  --resolve api.github.com=198.51.100.10 --resolve api.anthropic.com=198.51.100.10 \
  --resolve pastebin.com=198.51.100.10 \
  --upstream-ca "$tmp/up-ca.pem" --no-system-trust --threads 2 2>"$tmp/serve.log" &
serve_pid=$!
for _ in $(seq 50); do
  ip netns exec "$gw" curl -s --max-time 1 http://127.0.0.1:15002/healthz 2>/dev/null | grep -q ok && break
  kill -0 "$serve_pid" 2>/dev/null || die "cordon serve exited"
  sleep 0.1
done
ip netns exec "$gw" curl -s --max-time 1 http://127.0.0.1:15002/healthz | grep -q ok || die "gateway not healthy"
mode=$(sed -n 's/^cordon: steering \([^;]*\);.*/\1/p' "$tmp/serve.log")
echo "   cordon serve is up (pid $serve_pid), steering: $mode"
# The sandbox: namespace, veth, pool address, the steering program on its host side (asked of
# serve over its control socket), and the vault registration; its resolv.conf names the gateway.
"$cordon" sandbox netns create "$sb" --profile coding-agent --gateway-netns "$gw" \
  >"$tmp/sandbox.json" 2>"$tmp/sandbox.err" || die "sandbox netns create: $(cat "$tmp/sandbox.err")"
sed 's/^/   /' "$tmp/sandbox.err"
sb_addr=$(sed -n 's/.*"address":"\([0-9.]*\)".*/\1/p' "$tmp/sandbox.json")
token=$("$cordon" token issue --credential github --sandbox "$sb" --ttl 1h --note demo 2>"$tmp/token.err")
token_id=$(sed -n 's/^issued token \([^ ]*\) .*/\1/p' "$tmp/token.err")
[ -n "$token" ] && [ -n "$token_id" ] || die "token issue: $(cat "$tmp/token.err")"
echo "   vault: github-pat, anthropic-api-key; sandbox $sb = $sb_addr (profile coding-agent)"
echo "   agent holds: gateway root cert + proxy token ${token:0:10}… (id $token_id); no secret"

mkdir -p "$tmp/agent"
agent() {  # agent ACTION: runs the agent in the sandbox, prints its one-line result
  ip netns exec "$sb" env -i PATH="$PATH" AGENT_CA="$tmp/gateway-root.pem" AGENT_OUT="$tmp/agent" \
    AGENT_TOKEN="$token" bash "$here/demo/agent.sh" "$1" 2>>"$tmp/agent/stderr" | tee -a "$tmp/agent/stdout"
}
expect_code() {  # expect_code WANT GOT WHAT
  [ "$2" = "HTTP $1" ] || die "$3: expected HTTP $1, got '$2'"
}
upstream_last() { tail -n 1 "$tmp/upstream.jsonl"; }
upstream_count() { wc -l <"$tmp/upstream.jsonl"; }

bold "6c. The agent calls out (curl in the sandbox, no proxy settings)"
echo "1) POST https://api.anthropic.com/v1/messages with no key: the gateway injects it"
r=$(agent model); echo "   agent got: $r"; expect_code 200 "$r" "allowed model call"
grep -q "\"x-api-key\":\"$model_key\"" <(upstream_last) || die "upstream did not get the real model key"
grep -o '"x-api-key":"[^"]*"' "$tmp/agent/model.body" | sed 's/^/   agent sees only: /'
ok "upstream received x-api-key=${model_key:0:14}… (the real key); the agent never had it"

echo "2) GET https://api.github.com/repos/acme/app with the proxy token: swapped for the PAT"
r=$(agent github); echo "   agent got: $r"; expect_code 200 "$r" "github call with token"
grep -q "\"authorization\":\"Bearer $pat\"" <(upstream_last) || die "upstream did not get the real PAT"
grep -qF "$token" "$tmp/upstream.jsonl" && die "the proxy token reached the upstream"
ok "upstream received Authorization: Bearer ${pat:0:12}…; the token never left the gateway"

echo "3) the same call without the token (token: required for github)"
n=$(upstream_count); r=$(agent github-no-token); echo "   agent got: $r"
expect_code 403 "$r" "github call without token"
[ "$(upstream_count)" = "$n" ] || die "a request without token reached the upstream"
ok "refused; nothing reached the upstream"

echo "4) DELETE https://api.github.com/repos/acme/app (read-only rules)"
n=$(upstream_count); r=$(agent delete); echo "   agent got: $r"
expect_code 403 "$r" "DELETE"; [ "$(upstream_count)" = "$n" ] || die "the DELETE reached the upstream"
ok "refused by policy"

echo "5) POST https://api.anthropic.com/v1/files (an upload route denied by name)"
n=$(upstream_count); r=$(agent upload); echo "   agent got: $r"
expect_code 403 "$r" "file upload"; [ "$(upstream_count)" = "$n" ] || die "the upload reached the upstream"
ok "refused by rule no-file-upload"

echo "6) https://pastebin.com/ (a host in no destination of the profile), at a hard-coded address"
n=$(upstream_count); r=$(agent other-host); echo "   agent got: $r"
[ "$r" = "HTTP 000" ] || [ "$r" = "HTTP 403" ] || die "pastebin.com: expected a refusal, got '$r'"
[ "$(upstream_count)" = "$n" ] || die "the pastebin request reached the upstream"
if [ "$r" = "HTTP 000" ]; then ok "refused at the TLS handshake (the SNI is not allowed): no certificate, no connection"
else ok "refused by the gateway"; fi

echo "7) domain fronting: TLS SNI api.github.com, HTTP Host api.anthropic.com"
n=$(upstream_count); r=$(agent fronting); echo "   agent got: $r"
case "$r" in "HTTP 4"*) ;; *) die "domain fronting: expected a 4xx refusal, got '$r'" ;; esac
[ "$(upstream_count)" = "$n" ] || die "the fronted request reached the upstream"
ok "refused: the Host must match the SNI"

echo "8) cordon token revoke $token_id, then the GitHub call again with the same token"
"$cordon" token revoke "$token_id" 2>&1 | sed 's/^/   /'
n=$(upstream_count); r=$(agent github); echo "   agent got: $r"
expect_code 403 "$r" "revoked token"; [ "$(upstream_count)" = "$n" ] || die "a revoked token was accepted"
ok "the running gateway refused the revoked token at once"

bold "6d. DNS: the gateway is the sandbox's only resolver"
r=$(agent dns-allowed); echo "   api.github.com -> $r"
[ "$r" = "198.18.0.1" ] || die "an allowed name should resolve to the synthetic 198.18.0.1, got '$r'"
ok "an allowed name gets a synthetic address (the gateway resolves the real one itself)"
r=$(agent dns-unlisted); echo "   pastebin.com -> $r"
[ "$r" = "NXDOMAIN" ] || die "an unlisted name should be NXDOMAIN, got '$r'"
r=$(agent dns-txt); echo "   TXT api.github.com -> $r"
[ "$r" = "REFUSED" ] || die "a TXT query should be REFUSED, got '$r'"
r=$(agent dns-tunnel); echo "   nbswy3dpeb3w64tmmqqgc3dfmfzw2ylt.api.github.com -> $r"
[ "$r" = "REFUSED" ] || die "a tunnelling-shaped name should be REFUSED, got '$r'"
r=$(agent dns-outside); echo "   pastebin.com asked of 198.51.100.10:53 directly -> $r"
[ "$r" = "NXDOMAIN" ] || die "a query to an outside resolver should be answered by the gateway, got '$r'"
ok "unlisted names, TXT and tunnelling shapes are refused; an outside resolver is unreachable"

bold "6e. Everything else is dropped at the sandbox's interface, counted and audited"
r=$(agent port-8443); echo "   curl https://198.51.100.10:8443/ -> $r"
[ "$r" = "HTTP 000" ] || die "TCP 8443 should not connect, got '$r'"
r=$(agent udp-443); echo "   UDP 443 (QUIC) to 198.51.100.10 -> $r"
r=$(agent ping); echo "   ping 198.51.100.10 -> $r"
[ "$r" = "no reply" ] || die "ICMP should be dropped, got '$r'"
"$cordon" sandbox netns list >"$tmp/steering.json" 2>&1 || die "sandbox netns list"
grep -o '"drop_[a-z_]*":[1-9][0-9]*' "$tmp/steering.json" | sed 's/^/   counter /' || true
for _ in $(seq 30); do
  [ "$(grep -c '"event":"egress_dropped"' "$CORDON_HOME/audit/audit.jsonl")" -ge 3 ] && break; sleep 0.1
done
grep '"event":"egress_dropped"' "$CORDON_HOME/audit/audit.jsonl" | grep -q '"port":8443' || die "no egress_dropped line for TCP 8443"
grep '"event":"egress_dropped"' "$CORDON_HOME/audit/audit.jsonl" | grep -q '"protocol":"udp"' || die "no egress_dropped line for UDP 443"
ok "TCP 8443, UDP 443 and ICMP never left the sandbox's interface; each is an egress_dropped line"

bold "6f. Did any secret reach the sandbox?"
if grep -rqF -e "$pat" -e "$model_key" "$tmp/agent"; then die "a real secret is in what the agent saw"; fi
ok "neither the PAT nor the model key appears in anything the agent received ($(ls "$tmp/agent" | wc -l) files)"
grep -qF -e "$pat" -e "$model_key" "$CORDON_HOME/audit/audit.jsonl" && die "a secret is in the audit log"
ok "nor in the audit log"

bold "6g. Stop the gateway: the sandbox stays closed"
kill -TERM "$serve_pid"; wait "$serve_pid" || die "cordon serve exited with $?"
serve_pid=""
r=$(agent model); echo "   with the gateway stopped, the agent got: $r"
[ "$r" = "HTTP 000" ] || die "with the gateway stopped nothing may pass, got '$r'"
ok "fail closed: the program stays on the interface, the gateway's sockets are gone"
"$cordon" sandbox netns delete "$sb" --gateway-netns "$gw" 2>&1 | grep -v '^note:' | sed 's/^/   /'

bold "6h. The audit log of what happened, and its chain"
echo '$ cordon audit query'
"$cordon" audit query 2>&1 | sed 's/^/   /'
echo '$ cordon audit verify'
"$cordon" audit verify >"$tmp/verify.out" 2>&1 || { sed 's/^/   /' "$tmp/verify.out"; die "audit verify failed"; }
sed 's/^/   /' "$tmp/verify.out"
ok "egress demo passed (steering: $mode; no proxy settings in the sandbox)"
