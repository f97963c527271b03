#!/bin/bash
# Runs the SDK conformance suite (run_all.mjs + sdk_*.mjs) against cordon-agent.
#   run_sdk_e2e.sh AGENT_BINARY NPM_CACHE_DIR [PATTERN]
# SDK_RUNNER=<file.mjs> runs that script instead of run_all.mjs (bench/agent uses it); it gets
# the same environment plus AGENT_PID.
# Needs root: the agent runs in a network namespace this script creates (so the SDK's fixed
# http://localhost:49983 reaches it and nothing else), and setuids to the test user. Users come
# from passwd/group files in a temp dir (the host's are not touched). Exit 77 = skipped.
set -u
AGENT=$(readlink -f "$1")
CACHE=$2
PATTERN=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)

skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (network namespace, setuid to the test user)"
command -v node >/dev/null || skip "node is not installed"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
[ -x "$AGENT" ] || { echo "agent binary $AGENT missing"; exit 1; }

if [ ! -f "$CACHE/node_modules/e2b/package.json" ]; then
  mkdir -p "$CACHE"
  [ -f "$CACHE/package.json" ] || echo '{"name":"e2b-cache","private":true}' >"$CACHE/package.json"
  if ! (cd "$CACHE" && timeout 300 npm install --no-audit --no-fund e2b@2.51.0 >npm.log 2>&1); then
    skip "npm install e2b@2.51.0 failed: $(tail -n 3 "$CACHE/npm.log" | tr '\n' ' ')"
  fi
fi

NS=cordon-agent-e2e-$$
TMP=$(mktemp -d /tmp/cordon-agent-e2e.XXXXXX)
AGENT_PIDS=()
cleanup() {
  for p in "${AGENT_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  # Whatever still runs in the namespace is ours (background test commands).
  for p in $(ip netns pids "$NS" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  for p in "${AGENT_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  ip netns del "$NS" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$NS" || skip "cannot create a network namespace"
ip -n "$NS" link set lo up

HOME_DIR=$TMP/home/user
mkdir -p "$HOME_DIR"
chown 1000:1000 "$HOME_DIR"
chmod 755 "$TMP" "$TMP/home"
cat >"$TMP/passwd" <<PW
root:x:0:0:root:/root:/bin/bash
user:x:1000:1000:user:$HOME_DIR:/bin/bash
PW
cat >"$TMP/group" <<GR
root:x:0:
user:x:1000:
extra:x:2000:user
GR
echo "TEMPLATE_VAR=from-template" >"$TMP/template.env"
echo "# system bundle" >"$TMP/system-ca.pem"

start_agent() {  # $1 = port, $2 = log name
  ip netns exec "$NS" "$AGENT" --listen "127.0.0.1:$1" --listen "[::1]:$1" \
    --passwd-file "$TMP/passwd" --group-file "$TMP/group" --template-env "$TMP/template.env" \
    --system-ca-file "$TMP/system-ca.pem" --extra-ca-file "$TMP/$2-extra-ca.pem" \
    >"$TMP/$2.log" 2>&1 &
  AGENT_PIDS+=($!)
}
start_agent 49983 agent
MAIN_AGENT_PID=${AGENT_PIDS[0]}
start_agent 49984 auth-agent  # its token is set by the auth checks; kept apart from the rest

ip netns exec "$NS" env -i PATH="$PATH" HOME=/root E2B_DEBUG=true E2B_API_KEY=x \
  E2B_MODULE="$CACHE/node_modules/e2b/dist/index.mjs" AGENT_HOME="$HOME_DIR" \
  AUTH_AGENT_URL=http://127.0.0.1:49984 EXTRA_CA_FILE="$TMP/auth-agent-extra-ca.pem" \
  SYSTEM_CA_FILE="$TMP/system-ca.pem" SDK_PATTERN="$PATTERN" AGENT_PID="$MAIN_AGENT_PID" \
  BENCH_RUNS="${BENCH_RUNS:-}" BENCH_BACKGROUND="${BENCH_BACKGROUND:-}" \
  node "${SDK_RUNNER:-$HERE/run_all.mjs}"
rc=$?
if [ $rc -ne 0 ]; then
  echo "--- agent log ---"
  cat "$TMP/agent.log"
  echo "--- auth agent log ---"
  cat "$TMP/auth-agent.log"
fi
exit $rc
