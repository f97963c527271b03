#!/usr/bin/env bash
# Makes sure the real E2B JS SDK (e2b@2.51.0, from npm) is installed in CACHE_DIR
# (BUILD_DIR/npm/e2b by convention) and prints CACHE_DIR. Concurrent callers wait for one
# install (flock), so suites running in parallel never install into one folder at once.
# Exit 0 ok; 77 skipped (no node/npm, or npm could not install; reason on stderr).
# Usage: ensure_sdk.sh CACHE_DIR
set -uo pipefail
cache=${1:?usage: ensure_sdk.sh CACHE_DIR}
version=2.51.0
command -v node >/dev/null || { echo "SKIPPED: node is not installed" >&2; exit 77; }
mkdir -p "$cache" || exit 1
cache=$(realpath "$cache")
exec 9>"$cache/.install.lock"
flock 9
if [ ! -f "$cache/node_modules/e2b/package.json" ] ||
   ! grep -q "\"version\": \"$version\"" "$cache/node_modules/e2b/package.json"; then
  command -v npm >/dev/null || { echo "SKIPPED: npm is not installed" >&2; exit 77; }
  [ -f "$cache/package.json" ] || echo '{"name":"e2b-cache","private":true}' >"$cache/package.json"
  if ! (cd "$cache" && timeout 300 npm install --no-audit --no-fund "e2b@$version" >npm.log 2>&1 9>&-); then
    echo "SKIPPED: npm install e2b@$version failed: $(tail -n 3 "$cache/npm.log" | tr '\n' ' ')" >&2
    exit 77
  fi
fi
echo "$cache"
