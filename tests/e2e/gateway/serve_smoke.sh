#!/bin/sh
# Smoke test of `cordon serve` with the real CA, policy, vault and audit log: starts it on
# loopback, checks 407 without identity, 403 for a denied host, 403 (floors) for an allowed
# name that resolves to loopback, /healthz and /metrics, a reload (good and broken rules), the
# audit log, a graceful SIGTERM, and a refused --dns-server NAME. Usage: serve_smoke.sh PATH/TO/cordon
set -eu
CORDON=${1:?usage: serve_smoke.sh PATH/TO/cordon}
command -v curl >/dev/null || { echo "SKIPPED: curl not installed"; exit 0; }
T=$(mktemp -d /tmp/cordon-serve-smoke-XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$T/serve.log" ] && cat "$T/serve.log"; exit 1; }

S="$T/state"
"$CORDON" --state "$S" init >/dev/null 2>&1 || "$CORDON" init --state "$S" >/dev/null
[ -f "$S/ca/root.pem" ] || "$CORDON" --state "$S" ca init >/dev/null
printf 'ghp_SMOKE_SECRET' | "$CORDON" --state "$S" vault put github-pat --stdin >/dev/null
# A value with CR/LF would split the header it is rendered into: refused when stored.
if printf 'ghp_a\r\nX-Evil: 1' | "$CORDON" --state "$S" vault put bad --stdin >/dev/null 2>"$T/put.err"; then
  fail "vault put accepted a value with CR LF"
fi
grep -q "CR" "$T/put.err" || fail "vault put error does not say why: $(cat "$T/put.err")"
SECRET=$("$CORDON" --state "$S" sandbox register sb1 --profile agent)
cat > "$T/rules.yaml" <<'YAML'
version: 1
credentials:
  - {name: github, secret: github-pat, inject: {header: Authorization, format: "Bearer {secret}"}}
destinations:
  - id: api
    hosts: [api.test]
    routes:
      - {id: all, credential: github}
profiles:
  agent: {destinations: [api]}
YAML
# --dns-server takes an address (the gateway's own resolver queries it), never a name.
if timeout 10 "$CORDON" --state "$S" serve --rules "$T/rules.yaml" --proxy-listen 127.0.0.1:0 \
    --dns-server dns.example 2>"$T/dns.err" </dev/null; then fail "--dns-server NAME accepted"; fi
grep -q "dns-server" "$T/dns.err" || fail "--dns-server error does not name it: $(cat "$T/dns.err")"
PORT=$((20000 + $$ % 20000))
APORT=$((PORT + 1))
"$CORDON" --state "$S" serve --rules "$T/rules.yaml" --proxy-listen 127.0.0.1:$PORT \
  --admin-listen 127.0.0.1:$APORT --resolve api.test=127.0.0.1 2>"$T/serve.log" &
PID=$!
for i in $(seq 50); do curl -s "http://127.0.0.1:$APORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -s "http://127.0.0.1:$APORT/healthz" | grep -q ok || fail "healthz"
[ "$(stat -c %a "$S/admin.sock")" = 600 ] || fail "admin socket is not 0600"

"$CORDON" --state "$S" ca export > "$T/root.pem"
code() { curl -s -o "$T/body" -w '%{http_code} %{http_connect}' --cacert "$T/root.pem" \
  --proxy "http://127.0.0.1:$PORT" "$@" || true; }
c=$(code https://api.test/x); echo "$c" | grep -q 407 || fail "no identity: $c"
c=$(code --proxy-user "sb1:$SECRET" https://evil.test/x); echo "$c" | grep -q 403 || fail "denied host: $c"
c=$(code --proxy-user "sb1:$SECRET" https://api.test/x); echo "$c" | grep -q 403 || fail "floors: $c"
grep -q floors "$T/body" || fail "floors body: $(cat "$T/body")"
curl -s "http://127.0.0.1:$APORT/metrics" | grep -q 'cordon_requests_total{decision="deny"} [1-9]' || fail metrics
echo "this: is: not: yaml: [" > "$T/rules.yaml.new"; mv "$T/rules.yaml.new" "$T/rules.yaml"
kill -HUP "$PID"; sleep 1.5
curl -s "http://127.0.0.1:$APORT/metrics" | grep -q 'cordon_reloads_total{result="failed"} [12]' || fail "broken reload not counted"
c=$(code --proxy-user "sb1:$SECRET" https://api.test/x); echo "$c" | grep -q 403 || fail "after broken reload: $c"
kill -TERM "$PID"; wait "$PID" || fail "serve exit code $?"
PID=
# No --steering given and no transparent listener: serve runs without steering and says so
# once, naming the flag; an explicit --steering none says nothing.
[ "$(grep -c 'steering off' "$T/serve.log")" = 1 ] || fail "no single steering notice: $(cat "$T/serve.log")"
grep 'steering off' "$T/serve.log" | grep -q -- '--steering' || fail "the notice does not name --steering"
echo 'version: 1' > "$T/min.yaml"
timeout 2 "$CORDON" --state "$S" serve --rules "$T/min.yaml" --proxy-listen 127.0.0.1:0 \
  --steering none 2>"$T/none.log" </dev/null || true
! grep -q 'steering off' "$T/none.log" || fail "--steering none still printed the notice"
grep -q '"event":"request"' "$S/audit/audit.jsonl" || fail "no request line in the audit log"
grep -q '"event":"policy_reload"' "$S/audit/audit.jsonl" || fail "no reload line in the audit log"
! grep -q ghp_SMOKE_SECRET "$S/audit/audit.jsonl" || fail "secret in the audit log"
echo "PASS: cordon serve smoke test"
