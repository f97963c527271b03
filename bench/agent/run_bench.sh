#!/bin/bash
# cordon-agent through the real E2B SDK (in a private network namespace, as the e2e suite sets
# it up) side by side with `runsc exec` into a running gVisor sandbox and fork+exec on the host:
# run('true') p50/p99, 100 MiB up and down, idle RSS; then a breakdown of run('true').
# Needs root.
#   bench/agent/run_bench.sh BUILD_DIR [RUNS]
# BUILD_DIR holds agent/cordon-agent and npm/e2b. The runsc column needs the `base` template:
# BENCH_ROOTFS=<rootfs dir>, else tests/e2e/templates/ensure_base.sh BUILD_DIR (needs
# BUILD_DIR/cli/cordon); without either, or without runsc, that column says why it is missing.
set -u
BUILD=$(readlink -f "${1:?usage: run_bench.sh BUILD_DIR [RUNS]}")
HERE=$(cd "$(dirname "$0")" && pwd)
export BENCH_RUNS=${2:-300}
EXEC_RUNS=${BENCH_EXEC_RUNS:-100}  # runsc exec costs tens of ms each
MIB=100
[ "$(id -u)" = 0 ] || { echo "SKIPPED: needs root"; exit 77; }

TMP=$(mktemp -d /tmp/cordon-agent-bench.XXXXXX)
RS_ROOT=$TMP/runsc-root
CID=cordon-bench-$$
RS=(runsc --root "$RS_ROOT" --platform=ptrace --network=none --overlay2=root:memory)
stop_sandbox() {
  if [ -d "$RS_ROOT" ]; then
    "${RS[@]}" kill "$CID" KILL >/dev/null 2>&1
    "${RS[@]}" delete --force "$CID" >/dev/null 2>&1
    rm -rf "$RS_ROOT"
  fi
  if mountpoint -q "$TMP/rootfs"; then umount "$TMP/rootfs"; fi
}
cleanup() {
  stop_sandbox
  # Never delete through the template's bind mount if it could not be unmounted.
  mountpoint -q "$TMP/rootfs" || rm -rf --one-file-system "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
now_ns() { date +%s%N; }
RUNSC_JSON=$TMP/runsc.json

runsc_column() {
  command -v runsc >/dev/null || { echo '{"missing":"runsc is not installed"}'; return; }
  local rootfs=${BENCH_ROOTFS:-}
  if [ -z "$rootfs" ]; then
    local state
    if ! state=$("$HERE/../../tests/e2e/templates/ensure_base.sh" "$BUILD" 2>"$TMP/ensure.err"); then
      printf '{"missing":"no base template: %s"}\n' "$(tail -n1 "$TMP/ensure.err" | tr -d '"\\')"
      return
    fi
    rootfs=$(readlink -f "$state/templates/aliases/base")/rootfs
  fi
  [ -x "$rootfs/bin/true" ] || { printf '{"missing":"%s is not a rootfs"}\n' "$rootfs"; return; }
  mkdir -p "$TMP/bundle" "$RS_ROOT" "$TMP/rootfs"
  # The template through a read-only bind (so nothing can write through to it), `readonly:
  # false` in the spec so that writes land in runsc's memory overlay (network-facts.md); no
  # network (the sandbox's own stack is not what is measured here).
  if ! mount --bind "$rootfs" "$TMP/rootfs" || ! mount -o remount,bind,ro "$TMP/rootfs"; then
    echo '{"missing":"cannot bind-mount the rootfs read-only"}'
    return
  fi
  cat >"$TMP/bundle/config.json" <<EOF
{"ociVersion":"1.0.0",
 "process":{"user":{"uid":0,"gid":0},"args":["/bin/sleep","infinity"],
            "env":["PATH=/usr/local/bin:/usr/bin:/bin"],"cwd":"/"},
 "root":{"path":"$TMP/rootfs","readonly":false},"hostname":"bench",
 "mounts":[{"destination":"/proc","type":"proc","source":"proc"}],
 "linux":{"namespaces":[{"type":"pid"},{"type":"ipc"},{"type":"uts"},{"type":"mount"}]}}
EOF
  local t0 t1
  t0=$(now_ns)
  "${RS[@]}" run --detach --bundle "$TMP/bundle" "$CID" >"$TMP/runsc.log" 2>&1 ||
    { printf '{"missing":"runsc run failed: %s"}\n' "$(tail -n1 "$TMP/runsc.log" | tr -d '"\\')"; return; }
  t1=$(now_ns)
  local start_ms=$(((t1 - t0) / 1000000))
  # Every exec's output goes to /dev/null or a pipe: runsc exec overwrites a regular file.
  for _ in 1 2 3 4 5; do "${RS[@]}" exec "$CID" /bin/true >/dev/null; done  # warm up
  local xs=() i
  for ((i = 0; i < EXEC_RUNS; i++)); do
    t0=$(now_ns)
    "${RS[@]}" exec "$CID" /bin/true >/dev/null || { echo '{"missing":"runsc exec /bin/true failed"}'; return; }
    t1=$(now_ns)
    xs+=($(((t1 - t0) / 1000)))
  done
  # bash start-up inside the template, 50 runs per figure, started from a shell already
  # running there (so only the inner process is counted): natively in a chroot of the same
  # bind mount, and inside the gVisor sandbox (where a sandboxed agent would spawn it).
  local loop='s=$(date +%s%N); for i in $(seq 50); do CMD; done; e=$(date +%s%N); echo $(((e-s)/50000))'
  local shells=() where c
  for where in chroot gvisor; do
    for c in '/bin/true' '/bin/bash -c true' '/bin/bash --noprofile -l -c true' '/bin/bash -l -c true'; do
      local script=${loop/CMD/$c} v
      if [ $where = chroot ]; then
        v=$(chroot --userspec=1000:1000 "$TMP/rootfs" /usr/bin/env -i HOME=/home/user \
          PATH=/usr/bin:/bin /bin/sh -c "$script" </dev/null 2>/dev/null)
      else
        v=$("${RS[@]}" exec --user 1000:1000 --env HOME=/home/user "$CID" /bin/sh -c \
          "$script" </dev/null 2>/dev/null | cat)
      fi
      shells+=("${v:-null}")
    done
  done
  # Idle overhead of the sandbox: RSS of every process of this container's runsc root.
  local rss=0 p
  for p in $(pgrep -f -- "$RS_ROOT"); do
    rss=$((rss + $(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
  done
  head -c $((MIB * 1024 * 1024)) /dev/urandom >"$TMP/src.bin"
  local up=() down=() got
  for i in 1 2 3; do
    t0=$(now_ns)
    "${RS[@]}" exec "$CID" /bin/sh -c 'cat > /bench.bin' <"$TMP/src.bin" >/dev/null ||
      { echo '{"missing":"runsc exec upload failed"}'; return; }
    t1=$(now_ns)
    up+=($(((t1 - t0) / 1000)))
    t0=$(now_ns)
    got=$("${RS[@]}" exec "$CID" /bin/cat /bench.bin | wc -c)  # a pipe: see network-facts.md
    t1=$(now_ns)
    down+=($(((t1 - t0) / 1000)))
    [ "$got" = $((MIB * 1024 * 1024)) ] || { printf '{"missing":"runsc exec cat gave %s bytes"}\n' "$got"; return; }
  done
  printf '{"start_ms":%s,"exec_us":[%s],"rss_kib":%s,"up_us":[%s],"down_us":[%s],"bytes":%s,"shell_us":[%s]}\n' \
    "$start_ms" "$(IFS=,; echo "${xs[*]}")" "$rss" "$(IFS=,; echo "${up[*]}")" \
    "$(IFS=,; echo "${down[*]}")" $((MIB * 1024 * 1024)) "$(IFS=,; echo "${shells[*]:-}")"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
runsc_column 2>"$TMP/runsc.err" | cat >"$RUNSC_JSON"
stop_sandbox
left=$(pgrep -f -- "$RS_ROOT" | wc -l)
[ "$left" = 0 ] || echo "WARNING: $left runsc processes of $CID are left"
[ -s "$TMP/runsc.err" ] && sed 's/^/runsc: /' "$TMP/runsc.err"

SDK_RUNNER="$HERE/sdk_bench.mjs" "$HERE/../../tests/e2e/agent/run_sdk_e2e.sh" \
  "$BUILD/agent/cordon-agent" "$BUILD/npm/e2b" | tee "$TMP/sdk.out"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || exit "$rc"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
grep '^RESULT ' "$TMP/sdk.out" | sed 's/^RESULT //' >"$TMP/sdk.json"
node "$HERE/table.mjs" "$TMP/sdk.json" "$RUNSC_JSON"
