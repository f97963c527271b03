#!/usr/bin/env bash
# Makes sure the `base` template is built in BUILD_DIR/template-cache (a cordon state directory:
# root CA from `cordon init`, templates/) and prints that directory on stdout. A cache hit takes
# about a second; the first build a few minutes. Suites that start sandboxes from it should use
# it as their state directory (--state / CORDON_HOME), or at least its ca/, because the template
# trusts that root CA. Uses BUILD_DIR/agent/cordon-agent when built, else the stand-in.
# Exit 0 ok; 77 skipped (not root, mmdebstrap missing, mirror unreachable; reason on stderr);
# 1 failure. Concurrent callers wait for one another (flock).
# Usage: ensure_base.sh BUILD_DIR
set -uo pipefail
build=$(realpath "${1:?usage: ensure_base.sh BUILD_DIR}")
here=$(cd "$(dirname "$0")" && pwd)
cordon=$build/cli/cordon
state=$build/template-cache
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: building templates needs root (mmdebstrap)" >&2; exit 77; }
command -v mmdebstrap >/dev/null || { echo "SKIPPED: mmdebstrap is not installed" >&2; exit 77; }
[ -x "$cordon" ] || { echo "ensure_base.sh: $cordon is not built (ninja cordon)" >&2; exit 1; }
agent=$build/agent/cordon-agent
if [ ! -x "$agent" ]; then
  echo "ensure_base.sh: $agent is not built; using the stand-in agent" >&2
  agent=$here/agent_standin.sh
fi
# Suites running in parallel wait for one build instead of racing on `init` and the store. The
# lock's fd is closed for every child (`9>&-`): with fd 9 taken, mmdebstrap's hooks get fds
# above 9, which dash (/bin/sh) cannot name ("Bad fd number").
exec 9>"$build/template-cache.lock"
flock 9
if [ ! -f "$state/ca/root.pem" ]; then
  "$cordon" --state "$state" init >/dev/null 9>&- || exit 1
fi
err=$(mktemp)
trap 'rm -f "$err"' EXIT
if ! "$cordon" --state "$state" template build base --agent "$agent" >/dev/null 2>"$err" 9>&-; then
  if grep -q "could not reach the apt sources" "$err"; then
    echo "SKIPPED: the Debian mirror is unreachable: $(grep 'cordon:' "$err" | head -1)" >&2
    exit 77
  fi
  cat "$err" >&2
  exit 1
fi
echo "$state"
