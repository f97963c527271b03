#!/bin/busybox sh
# The CLI path of the nested microVM test (README.md "microvm mode", step 7), run by
# microvm_inner.sh after the driver passed: `cordon serve --sandboxes` hosts the sandbox manager
# (Manager::create with the microvm backend, the gateway's own confinement), and the `cordon
# sandbox` CLI creates a microVM sandbox from a template registered by hand (the image the
# driver used), runs the confined request in it, pauses, resumes and kills it.
# Prints "MICROVM-CLI: ..." lines; the last is "MICROVM-CLI: PASS" or "MICROVM-CLI: FAIL <why>".
# Exit: 0 pass, 1 fail.
c=/bin/cordon
secret=$(cat /gw/secret)
fp=$(cat /gw/fingerprint)
log=/run/serve-cli.log
serve_pid="" id=""

now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
stop() {
  [ -n "$id" ] && timeout 120 $c sandbox kill "$id" > /dev/null 2>&1
  if [ -n "$serve_pid" ]; then
    kill -TERM "$serve_pid" 2> /dev/null
    wait "$serve_pid"
  fi
}
fail() {
  echo "MICROVM-CLI: FAIL $*"
  for f in $log $CORDON_HOME/sandboxes/*/console.log $CORDON_HOME/sandboxes/*/vmm.log \
    $CORDON_HOME/microvm/cache/*/console.log $CORDON_HOME/microvm/cache/*/vmm.log; do
    [ -s "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
  done
  ls -la $CORDON_HOME/sandboxes/* 2> /dev/null | head -40
  echo "--- dmesg"
  dmesg | grep -v ' br0: \|promiscuous\|ADDRCONF' | tail -n 30
  free -m
  df -m | grep -v '^cgroup\|^dev'
  for f in $(find /sys/fs/cgroup -name memory.events -path "*$id*" 2> /dev/null); do
    echo "--- $f: $(tr '\n' ' ' < $f) max=$(cat ${f%.events}.max) peak=$(cat ${f%.events}.peak 2> /dev/null)"
  done
  ps | grep '[c]ordon-vmm' | cut -c1-200
  stop
  exit 1
}

# The manager's sandboxes have 512 MiB of guest RAM (its default), and the template snapshot and a
# pause each write a memory file that size: more than the initramfs (half the RAM) has room for,
# and a monitor writing past a full tmpfs dies of SIGBUS without a word. So the state moves to a
# tmpfs of its own (one file system: the backend links files between its directories).
export CORDON_HOME=/cli-state
mkdir -p $CORDON_HOME
mount -t tmpfs -o size=2500m,mode=700 cli-state $CORDON_HOME || { echo "MICROVM-CLI: FAIL tmpfs"; exit 1; }
cp -a /gw/state/. $CORDON_HOME/ || { echo "MICROVM-CLI: FAIL copy of the state"; exit 1; }

# --- a template named "nested": the driver's image, registered as the template store lays one out
tid=nestedmicrovmtpl0001
d=$CORDON_HOME/templates/$tid
mkdir -p "$d/rootfs" "$CORDON_HOME/templates/aliases" "$CORDON_HOME/microvm" || fail "mkdir"
cp /guest/rootfs.ext4 "$d/rootfs.ext4" || fail "template image"
: > "$d/lock"
cat > "$d/manifest.json" << EOF
{"id": "$tid", "alias": "nested", "envd_version": "0.0.0",
 "built_at": "2026-01-01T00:00:00.000000Z", "packages": [], "env": {},
 "content_hash": "$(sha256sum /guest/rootfs.ext4 | cut -d' ' -f1)",
 "image_bytes": $(stat -c %s /guest/rootfs.ext4)}
EOF
ln -s ../$tid "$CORDON_HOME/templates/aliases/nested" || fail "template alias"
# microvm_default_options: <state>/microvm/{vmlinuz,initrd.cpio}; cordon-vmm beside cordon.
ln -s /guest/vmlinuz "$CORDON_HOME/microvm/vmlinuz"
ln -s /guest/initrd.cpio "$CORDON_HOME/microvm/initrd.cpio"

t=$(now)
$c serve --rules /gw/rules.yaml --sandboxes \
  --transparent-listen 127.0.0.1:15001 --admin-listen 127.0.0.1:15002 --steering ebpf \
  --resolve api.allowed.test=198.51.100.10 --resolve api.denied.test=198.51.100.10 \
  --upstream-ca /gw/up-ca.pem --no-system-trust --threads 1 2> $log &
serve_pid=$!
i=0
until [ -S $CORDON_HOME/sandbox.sock ] && grep -q 'cordon: sandbox manager' $log; do
  kill -0 $serve_pid 2> /dev/null || { serve_pid=""; fail "cordon serve --sandboxes exited"; }
  i=$((i + 1))
  [ $i -le 1200 ] || fail "cordon serve --sandboxes not ready in 120 s"
  sleep 0.1
done
echo "MICROVM-CLI: cordon serve --sandboxes ready after $(since $t) s"

t=$(now)
id=$(timeout 420 $c sandbox create --template nested --backend microvm --profile agent 2> /run/create.err) ||
  { id=""; fail "sandbox create: $(cat /run/create.err)"; }
echo "$id" | grep -qE '^[a-z0-9]{20}$' || fail "create printed '$id'"
echo "MICROVM-CLI: sandbox create --backend microvm: $id after $(since $t) s (template boot + snapshot + clone)"
$c sandbox list > /run/list.txt 2>&1
grep "$id" /run/list.txt | grep -q microvm || fail "list does not show $id as microvm: $(cat /run/list.txt)"

x() { timeout 60 $c sandbox exec "$id" -- "$@"; }
who=$(x /bin/sh -c 'echo $(hostname) $(id -un)') || fail "exec: $who"
[ "$who" = "$id user" ] || fail "exec said '$who'"

# The confined request, as the driver's, through the manager's own confinement this time.
curl_allowed() {
  local path=$1 out
  out=$(x /usr/bin/curl -sS --max-time 20 --cacert /etc/cordon/ca.pem -w '\n%{http_code}' \
    "https://api.allowed.test$path" 2>&1)
  echo "MICROVM-CLI: curl https://api.allowed.test$path: $(echo "$out" | tr '\n' ' ' | cut -c1-300)"
  case "$out" in *"$secret"*) fail "the secret reached the guest" ;; esac
  [ "$(echo "$out" | tail -n 1)" = 200 ] || fail "curl $path did not answer 200"
  echo "$out" | grep -qF "$fp" || fail "no fingerprint of the vault's credential in the echo of $path"
  grep -F "\"path\":\"$path\"" /run/upstream.jsonl | grep -qF "Bearer $secret" ||
    fail "the upstream got no request for $path carrying the vault's credential"
  i=0
  until grep -F "\"sandbox\":\"$id\"" $CORDON_HOME/audit/audit.jsonl |
    grep -F '"event":"request"' | grep -qF "\"path\":\"$path\""; do
    i=$((i + 1))
    [ $i -le 25 ] || fail "no audit request line for $id $path"
    sleep 0.2
  done
}
curl_allowed /cli
out=$(x /usr/bin/curl -sS --max-time 5 http://198.51.100.10:8443/ok 2>&1)
case "$out" in *cordon-nested-http-ok*) fail "TCP to 198.51.100.10:8443 was not dropped" ;; esac

t=$(now)
timeout 150 $c sandbox pause "$id" > /run/pause.out 2>&1 || fail "pause: $(cat /run/pause.out)"
echo "MICROVM-CLI: pause after $(since $t) s"
$c sandbox list 2> /dev/null | grep "$id" | grep -q paused || fail "$id not listed as paused"
t=$(now)
timeout 150 $c sandbox resume "$id" > /run/resume.out 2>&1 || fail "resume: $(cat /run/resume.out)"
echo "MICROVM-CLI: resume after $(since $t) s"
curl_allowed /cli-resumed
x /bin/sh -c 'exit 4'
[ $? = 4 ] || fail "exec did not pass the exit code on"

timeout 120 $c sandbox kill "$id" > /run/kill.out 2>&1 || fail "kill: $(cat /run/kill.out)"
gone=$id
id=""
! $c sandbox list 2> /dev/null | grep -q "$gone" || fail "$gone still listed after kill"
# The driver's monitors are gone already (it checked), so any cordon-vmm now is the manager's.
for p in /proc/[0-9]*; do
  tr '\0' ' ' < $p/cmdline 2> /dev/null | grep -q "^[^ ]*cordon-vmm " && fail "a monitor is left: $p"
done
stop
echo "MICROVM-CLI: PASS create/exec/pause/resume/kill through cordon sandbox, confined request"
exit 0
