#!/usr/bin/env bash
# Template builds end to end with the real mmdebstrap (sandbox/templates/, design.md §7):
#   1. `cordon template build base` into the shared cache state directory, then again: a cache
#      hit in under 2 s with the same id;
#   2. the rootfs: the agent runs (--version, in a chroot), user 1000, the root CA in the
#      bundle, /etc/cordon/template.env, python3/curl/git, a plain resolv.conf; the ext4 image
#      passes e2fsck -fn and holds the agent;
#   3. a build with a missing package names it, leaves no temporary directory, and `base` keeps
#      pointing at the old build;
#   4. a build killed with SIGTERM during mmdebstrap leaves nothing (no directory, mount,
#      process or alias).
# Root only; prints SKIPPED (exit 0) without root, tools, or a reachable Debian mirror.
# Usage: templates_e2e.sh CORDON AGENT CACHE_STATE_DIR
set -uo pipefail
cordon=$(realpath "${1:?usage: templates_e2e.sh CORDON AGENT CACHE_STATE_DIR}")
agent=${2:?usage: templates_e2e.sh CORDON AGENT CACHE_STATE_DIR}
[ -x "$agent" ] || { echo "FAIL: the agent $agent is not built (ninja cordon-agent)"; exit 1; }
agent=$(realpath "$agent")
state=${3:?usage: templates_e2e.sh CORDON AGENT CACHE_STATE_DIR}
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root (mmdebstrap --mode=root, chroot)"; exit 0; }
for t in mmdebstrap unshare chroot e2fsck debugfs mkfs.ext4 python3; do
  command -v "$t" >/dev/null || { echo "SKIPPED: $t is not installed"; exit 0; }
done
case "$agent" in */agent_standin.sh) echo "NOTE: cordon-agent is not built; using $agent" ;; esac

mkdir -p "$state"
state=$(realpath "$state")
tpl=$state/templates
tmp=$(mktemp -d /tmp/cordon-tpl-e2e.XXXXXX)
bg_pid=""
failures=0
cleanup() {
  [ -n "$bg_pid" ] && kill -KILL "$bg_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

check() {  # check NAME COMMAND...: runs the command, records PASS/FAIL
  local name=$1; shift
  if "$@"; then echo "PASS: $name"; else echo "FAIL: $name"; failures=$((failures + 1)); fi
}
cordon() { "$cordon" --state "$state" "$@"; }
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }
no_leftovers() {  # no temporary directory, mount or build process under the state directory
  local left
  left=$(ls -d "$tpl"/.tmp-* "$tpl"/layers/.tmp-* 2>/dev/null)
  [ -z "$left" ] || { echo "  leftover directories: $left"; return 1; }
  ! grep -qF " $tpl/" /proc/self/mountinfo || { echo "  leftover mounts under $tpl"; return 1; }
  local p
  for p in /proc/[0-9]*; do
    if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF "$tpl/"; then
      echo "  leftover process ${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline")"; return 1
    fi
  done
  return 0
}

echo "template cache (state directory): $state"
[ -f "$state/ca/root.pem" ] || cordon init >/dev/null || { echo "FAIL: cordon init"; exit 1; }

# 1. Build (or reuse) base, then the cache hit.
t0=$(now)
cordon template build base --agent "$agent" >"$tmp/id" 2>"$tmp/build.err"
rc=$?
t1=$(now)
if [ $rc -ne 0 ]; then
  if grep -q "could not reach the apt sources" "$tmp/build.err"; then
    echo "SKIPPED: the Debian mirror is unreachable: $(grep 'cordon:' "$tmp/build.err" | head -1)"
    exit 0
  fi
  sed 's/^/  /' "$tmp/build.err"
  echo "FAIL: cordon template build base exited $rc"
  exit 1
fi
id=$(cat "$tmp/id")
grep -E "layer built in|built in|up to date" "$tmp/build.err" | sed 's/^/  /'
echo "  first build (or reuse) of base: $(elapsed "$t0" "$t1") s"
check "the build prints a 20-character id alone on stdout" \
  grep -qxE '[a-z0-9]{20}' "$tmp/id"
t0=$(now)
id2=$(cordon template build base --agent "$agent" 2>"$tmp/build2.err")
t1=$(now)
hit=$(elapsed "$t0" "$t1")
echo "  second build (cache hit): $hit s"
check "the same inputs give the same id" test "$id2" = "$id"
check "the second build is a cache hit in under 2 s" \
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 2 else 1)" "$hit"
check "the cache hit says so" grep -q "up to date" "$tmp/build2.err"

dir=$tpl/$id
root=$dir/rootfs
img=$dir/rootfs.ext4
in_root() {  # runs a command in the rootfs with /proc, in a throwaway mount namespace
  unshare --mount --propagation private --pid --fork -- sh -c \
    'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" "$@"
}

# 2. The rootfs and the image.
check "cordon template list shows base as current" \
  sh -c "'$cordon' --state '$state' template list | grep -E '^$id +base +yes'"
check "find by the JSON list gives the rootfs path" \
  sh -c "'$cordon' --state '$state' template list --json | python3 -c \"import json,sys; t=[x for x in json.load(sys.stdin) if x['id']=='$id'][0]; sys.exit(0 if t['rootfs_dir']=='$root' and t['current'] else 1)\""
check "the agent is installed 0755" test "$(stat -c %a "$root/usr/local/bin/cordon-agent")" = 755
check "the agent is the given binary" cmp -s "$agent" "$root/usr/local/bin/cordon-agent"
check "the agent runs in the rootfs (--version)" in_root /usr/local/bin/cordon-agent --version
check "user 1000 exists with home /home/user and bash" \
  sh -c "grep -qx 'user:x:1000:1000::/home/user:/bin/bash' '$root/etc/passwd'"
check "root exists" grep -q '^root:x:0:0:' "$root/etc/passwd"
check "/home/user belongs to user" test "$(stat -c %u:%g "$root/home/user")" = 1000:1000
check "the cordon CA is in /usr/local/share/ca-certificates" \
  cmp -s "$state/ca/root.pem" "$root/usr/local/share/ca-certificates/cordon-root.crt"
ca_body=$(sed '/-----/d' "$state/ca/root.pem" | tr -d '\n')
check "the cordon CA is in /etc/ssl/certs/ca-certificates.crt" \
  sh -c "tr -d '\n' < '$root/etc/ssl/certs/ca-certificates.crt' | grep -qF '$ca_body'"
for v in SSL_CERT_FILE REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS CURL_CA_BUNDLE; do
  check "template.env sets $v" \
    grep -qx "$v=/etc/ssl/certs/ca-certificates.crt" "$root/etc/cordon/template.env"
done
check "python3 runs" in_root python3 -c 'import ssl, json; print(ssl.OPENSSL_VERSION)'
check "curl runs" in_root curl --version
check "git runs" in_root git --version
check "ps (procps) runs" in_root ps -e
check "python3 uses the bundle with SSL_CERT_FILE" \
  in_root env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt python3 -c \
  'import ssl; c = ssl.create_default_context(); assert c.cert_store_stats()["x509_ca"] > 100'
check "/etc/resolv.conf is a plain file" sh -c "test -f '$root/etc/resolv.conf' && ! test -L '$root/etc/resolv.conf'"
check "apt lists and caches are gone" sh -c "! ls '$root'/var/lib/apt/lists/*_Packages >/dev/null 2>&1"
check "docs are excluded (copyright kept)" \
  sh -c "test -z \"\$(ls '$root/usr/share/man' 2>/dev/null)\" && test -f '$root/usr/share/doc/bash/copyright'"
check "manifest.json names id, alias, envd_version, packages, content_hash" python3 - "$dir/manifest.json" "$id" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["id"] == sys.argv[2] and m["alias"] == "base", m
assert m["envd_version"] and len(m["content_hash"]) == 64, m
assert {"bash", "python3", "curl", "git", "ca-certificates", "procps", "coreutils"} <= set(m["packages"])
PY
check "the ext4 image passes e2fsck -fn" e2fsck -fn "$img"
check "the ext4 image holds the agent" \
  sh -c "debugfs -R 'stat /usr/local/bin/cordon-agent' '$img' 2>&1 | grep -q 'Type: regular'"
check "the ext4 image holds template.env" \
  sh -c "debugfs -R 'cat /etc/cordon/template.env' '$img' 2>/dev/null | grep -q '^SSL_CERT_FILE='"
echo "  sizes: rootfs $(du -sm "$root" | cut -f1) MiB, image $(( $(stat -c %s "$img") >> 20 )) MiB" \
     "($(( $(du -k "$img" | cut -f1) >> 10 )) MiB allocated), files $(find "$root" | wc -l)"

# 3. A missing package: named, nothing left, base intact.
t0=$(now)
cordon template build base --agent "$agent" --packages jq,no-such-package-xyz >"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
t1=$(now)
echo "  failed build took $(elapsed "$t0" "$t1") s"
check "a build with a missing package fails" test $rc -ne 0
check "the error names the missing package" grep -q "cordon:.*no-such-package-xyz" "$tmp/bad.err"
check "the error does not blame the good package" sh -c "! grep 'cordon:' '$tmp/bad.err' | grep -q 'jq'"
check "nothing is printed on stdout" test ! -s "$tmp/bad.out"
check "the failed build leaves nothing behind" no_leftovers
check "base still points at the old build" \
  sh -c "'$cordon' --state '$state' template list | grep -qE '^$id +base +yes'"
check "the old build is intact" e2fsck -fn "$img"
check "an invalid package name is refused before building" \
  sh -c "'$cordon' --state '$state' template build base --agent '$agent' --packages 'bad name' 2>&1 | grep -q \"'bad name' is not a valid\""

# 4. SIGTERM during mmdebstrap (a package set not built yet, so mmdebstrap runs).
# Started directly (not through the cordon() function) so that $! is cordon itself.
"$cordon" --state "$state" template build e2e-interrupted --agent "$agent" --packages file \
  >/dev/null 2>"$tmp/int.err" &
bg_pid=$!
started=no
for _ in $(seq 1800); do
  # The real run (not the dry run) while it installs: its chroot has proc, sys and dev mounted.
  if grep -q "^template: mmdebstrap: \(extracting\|installing\)" "$tmp/int.err"; then
    started=yes; break
  fi
  kill -0 "$bg_pid" 2>/dev/null || break
  sleep 0.1
done
check "mmdebstrap started" test $started = yes
# Why not, when it did not (a mirror that failed, a build that ended early): its own words.
[ $started = yes ] || sed 's/^/  int.err: /' "$tmp/int.err" | tail -n 15
kill -TERM "$bg_pid"
wait "$bg_pid"
rc=$?
bg_pid=""
check "the interrupted build exits 143" test $rc -eq 143
check "the interrupted build says so" grep -q "interrupted" "$tmp/int.err"
check "the interrupted build leaves nothing behind" no_leftovers
check "the interrupted build has no alias" test ! -e "$tpl/aliases/e2e-interrupted"
check "base is still current after the interrupt" \
  sh -c "'$cordon' --state '$state' template list | grep -qE '^$id +base +yes'"

if [ $failures -ne 0 ]; then
  echo "$failures check(s) failed; build output:"
  sed 's/^/  /' "$tmp/build.err"
  exit 1
fi
echo "all template checks passed (cache: $state)"
