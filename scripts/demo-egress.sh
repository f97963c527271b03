#!/usr/bin/env bash
# Step 6 of the main-job demo (scripts/demo.sh): the egress story, on this machine, with no
# internet (design.md §6: never a packet toward the real network). It builds three network
# namespaces, none with a route to the machine's interfaces:
#   sandbox 192.0.2.2  --veth--  gateway 192.0.2.1 | 198.51.100.1  --veth--  internet 198.51.100.10
# The "internet" holds a fake TLS upstream (its own test CA, made here with openssl) playing
# api.github.com and api.anthropic.com; the gateway namespace runs `cordon serve` with a
# transparent listener fed by nftables TPROXY; the sandbox runs scripts/demo/agent.sh, plain curl
# with no proxy settings and no secrets. Then it shows the audit log and verifies its chain.
# Exits non-zero when an expectation fails; removes everything it made, also on failure.
# Usage (root): scripts/demo-egress.sh PATH/TO/cordon [PATH/TO/cordon-fake-upstream]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cordon=$(realpath "${1:?usage: demo-egress.sh PATH/TO/cordon [PATH/TO/cordon-fake-upstream]}")
upstream_bin=${2:-$(dirname "$cordon")/../tests/tools/fake_upstream/cordon-fake-upstream}
[ -x "$upstream_bin" ] || { echo "demo-egress: no fake upstream at $upstream_bin (build target cordon-fake-upstream)" >&2; exit 1; }
upstream_bin=$(realpath "$upstream_bin")
[ "$(id -u)" -eq 0 ] || { echo "demo-egress: needs root (network namespaces, nftables)" >&2; exit 1; }
for t in ip nft curl openssl; do
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
  # Deleting a namespace removes its veths and its nft table with it.
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
  exit 1
}

export CORDON_HOME=$tmp/state
pat=ghp_demo_REAL_github_pat_0123456789
model_key=sk-ant-demo-REAL-model-key-9876543210

bold "6a. A fake internet: three namespaces, no route out, a TLS upstream with its own CA"
ip netns add "$sb"; ip netns add "$gw"; ip netns add "$inet"
ip -n "$sb" link add v-sb type veth peer name v-gw-sb netns "$gw"
ip -n "$gw" link add v-gw-in type veth peer name v-in netns "$inet"
ip -n "$sb" addr add 192.0.2.2/24 dev v-sb
ip -n "$gw" addr add 192.0.2.1/24 dev v-gw-sb
ip -n "$gw" addr add 198.51.100.1/24 dev v-gw-in
ip -n "$inet" addr add 198.51.100.10/24 dev v-in
for l in "$sb lo" "$sb v-sb" "$gw lo" "$gw v-gw-sb" "$gw v-gw-in" "$inet lo" "$inet v-in"; do
  set -- $l; ip -n "$1" link set "$2" up
done
ip -n "$sb" route add default via 192.0.2.1   # the sandbox's only way out is the gateway
ip -n "$gw" rule add fwmark 0x1 lookup 100    # TPROXY'd packets are delivered locally
ip -n "$gw" route add local 0.0.0.0/0 dev lo table 100
# The sandbox's "DNS": every name answers some address; the gateway ignores it and resolves
# the SNI itself (ip netns exec bind-mounts /etc/netns/NAME/hosts over /etc/hosts).
mkdir -p "/etc/netns/$sb"
printf '127.0.0.1 localhost\n203.0.113.7 api.github.com api.anthropic.com pastebin.com\n' >"/etc/netns/$sb/hosts"
echo "   sandbox $sb (192.0.2.2) -> gateway $gw -> internet $inet (198.51.100.10)"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj '/CN=demo internet CA' \
  -keyout "$tmp/up-ca.key" -out "$tmp/up-ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '/CN=api.github.com' \
  -keyout "$tmp/up.key" -out "$tmp/up.csr" 2>/dev/null
printf 'subjectAltName=DNS:api.github.com,DNS:api.anthropic.com\n' >"$tmp/up.ext"
openssl x509 -req -in "$tmp/up.csr" -CA "$tmp/up-ca.pem" -CAkey "$tmp/up-ca.key" -CAcreateserial \
  -days 1 -extfile "$tmp/up.ext" -out "$tmp/up.pem" 2>/dev/null
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
"$cordon" sandbox register agent-1 --profile coding-agent --address 192.0.2.2 >/dev/null 2>&1 || die "sandbox register"
token=$("$cordon" token issue --credential github --sandbox agent-1 --ttl 1h --note demo 2>"$tmp/token.err")
token_id=$(sed -n 's/^issued token \([^ ]*\) .*/\1/p' "$tmp/token.err")
[ -n "$token" ] && [ -n "$token_id" ] || die "token issue: $(cat "$tmp/token.err")"
"$cordon" ca export >"$tmp/gateway-root.pem"
echo "   vault: github-pat, anthropic-api-key; sandbox agent-1 = 192.0.2.2 (profile coding-agent)"
echo "   agent holds: gateway root cert + proxy token ${token:0:10}… (id $token_id); no secret"
ip netns exec "$gw" "$cordon" serve --rules "$here/demo/rules.yaml" \
  --transparent-listen 127.0.0.1:15001 --admin-listen 127.0.0.1:15002 \
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
# Steer the sandbox's TCP 80/443, to whatever address, into the transparent listener; forward
# nothing else (the gateway namespace never routes the sandbox's packets onward itself).
cat >"$tmp/steer.nft" <<NFT
table ip cordon_demo {
  chain pre { type filter hook prerouting priority mangle;
    iifname "v-gw-sb" meta l4proto tcp tcp dport { 80, 443 } tproxy to 127.0.0.1:15001 meta mark set 1 accept; }
  chain forward_drop { type filter hook forward priority 0; iifname "v-gw-sb" drop; }
}
NFT
ip netns exec "$gw" nft -f "$tmp/steer.nft"
echo "   cordon serve (transparent, TPROXY :443 -> 127.0.0.1:15001) is up, pid $serve_pid"

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

echo "6) https://pastebin.com/ (a host in no destination of the profile)"
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

bold "6d. Did any secret reach the sandbox?"
if grep -rqF -e "$pat" -e "$model_key" "$tmp/agent"; then die "a real secret is in what the agent saw"; fi
ok "neither the PAT nor the model key appears in anything the agent received ($(ls "$tmp/agent" | wc -l) files)"
grep -qF -e "$pat" -e "$model_key" "$CORDON_HOME/audit/audit.jsonl" && die "a secret is in the audit log"
ok "nor in the audit log"

bold "6e. Stop the gateway; the audit log of what happened, and its chain"
kill -TERM "$serve_pid"; wait "$serve_pid" || die "cordon serve exited with $?"
serve_pid=""
echo '$ cordon audit query'
"$cordon" audit query 2>&1 | sed 's/^/   /'
echo '$ cordon audit verify'
"$cordon" audit verify >"$tmp/verify.out" 2>&1 || { sed 's/^/   /' "$tmp/verify.out"; die "audit verify failed"; }
sed 's/^/   /' "$tmp/verify.out"
ok "egress demo passed (transparent mode: TPROXY, no proxy settings in the sandbox)"
