#!/bin/busybox sh
# /init of the inner machine (L1) in the nested boot test. Runs on the Debian cloud kernel under
# the outer QEMU (TCG, -cpu max), loads kvm-amd, and:
#   test:  boots the guest (L2) with cordon-vmm, checks its reports over vsock and over the TAP,
#          snapshots it, restores it twice (two clones, each in a new cordon-vmm), checks that each
#          answers again and reseeded the guest kernel for its own entropy generation;
#   bench: boots the same guest with cordon-vmm and with QEMU -M microvm, side by side.
# Mode and run count come from the kernel command line: nested.mode=test|bench|both,
# nested.runs=N. Every result line starts with "NESTED"; the last one is
# "NESTED-RESULT: PASS" or "NESTED-RESULT: FAIL <why>". Powers off at the end in every case.
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /run /tmp

MODE=test
RUNS=1
VERBOSE=0
for w in $(cat /proc/cmdline); do
  case "$w" in
    nested.mode=*) MODE=${w#nested.mode=} ;;
    nested.runs=*) RUNS=${w#nested.runs=} ;;
    nested.verbose=1) VERBOSE=1 ;;
  esac
done

# To the console itself: fail may run inside a $(...) whose output would be swallowed.
finish() {
  echo "NESTED-RESULT: $*" > /dev/console
  sync
  poweroff -f
  sleep 5
}
fail() { finish "FAIL $*"; }

ms_since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# Transparent huge pages for shared memory on request (madvise), as a cordon host should have:
# cordon-vmm's guest RAM is a memfd, and 2 MiB pages spare the nested paging one fault per 4 KiB.
# (QEMU's anonymous RAM gets THP from the kernel default "always".) nested.shmem_thp=never
# measures without.
SHMEM_THP=advise
for w in $(cat /proc/cmdline); do
  case "$w" in nested.shmem_thp=*) SHMEM_THP=${w#nested.shmem_thp=} ;; esac
done
echo $SHMEM_THP > /sys/kernel/mm/transparent_hugepage/shmem_enabled
for m in irqbypass kvm kvm-amd tun; do
  insmod /lib/modules/$m.ko || fail "insmod $m"
done
[ -c /dev/kvm ] || fail "no /dev/kvm after kvm-amd"
echo "NESTED: inner kernel up at $(cut -d' ' -f1 /proc/uptime) s, kvm_amd npt=$(cat /sys/module/kvm_amd/parameters/npt)"

# The guest's command line: quiet (each console line costs ~20 ms here), no RTC probe (4.4 s
# without an RTC), reboot through the i8042 so that the monitor exits.
GCMD="console=ttyS0 quiet reboot=k panic=-1 pci=off initcall_blacklist=cmos_init i8042.noaux i8042.nomux i8042.dumbkbd"
# nested.verbose=1: the guest's boot messages (not quiet), shown after each bench boot.
[ "$VERBOSE" = 1 ] && GCMD="console=ttyS0 reboot=k panic=-1 pci=off initcall_blacklist=cmos_init i8042.noaux i8042.nomux i8042.dumbkbd"
GMEM=256
K=/guest/vmlinuz
I=/guest/initrd.cpio

# One word of a PONG reply: field "PONG 2 gen=ab reseeds=2 ..." gen -> ab.
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }

# Restores /run/snap into cordon-vmm number $1 (sockets /run/v$1.sock, /run/api$1.sock), pings it
# with "probe" (the guest then also reports getrandom() bytes drawn before its entropy check),
# checks that it continued, stops it. The reply goes to /run/reply$1.
restore_clone() {
  c=$1
  tr0=$(nested_tool now)
  cordon-vmm --restore /run/snap --vsock-uds /run/v$c.sock --tap tap0 --api-sock /run/api$c.sock \
    --serial /run/g$c.log > /run/vmm$c.log 2>&1 &
  VMMC=$!
  i=0
  while [ ! -S /run/v$c.sock ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
  # The restored guest first handles the vsock TRANSPORT_RESET that a restore sends (connections
  # do not survive a snapshot); a connection that races with it is reset, so the host reconnects.
  r="" i=0
  while [ $i -lt 20 ]; do
    r=$(nested_tool vsock-connect /run/v$c.sock 7002 "PING $c probe" 10000) && break
    r="" i=$((i + 1))
    sleep 0.5
  done
  tr1=$(nested_tool now)
  [ -n "$r" ] || { cat /run/g$c.log /run/vmm$c.log; fail "vsock ping after restore (clone $c)"; }
  echo "NESTED: clone $c after restore: $r (attempts: $((i + 1)))"
  echo "NESTED-RESTORE: clone $c: monitor start -> restored guest answered: $(ms_since $tr0 $tr1) ms"
  # A freshly booted guest would answer "PONG 1": a count of 2 or more is the old guest going on.
  n=$(echo "$r" | awk '$1 == "PONG" { print $2 }')
  [ -n "$n" ] && [ "$n" -ge 2 ] || fail "clone $c did not continue (reply: $r)"
  echo "$r" > /run/reply$c
  echo "NESTED: status: $(nested_tool api /run/api$c.sock '{"cmd":"status"}' 5000)"
  nested_tool api /run/api$c.sock '{"cmd":"stop"}' 10000 > /dev/null || fail "stop clone $c"
  wait $VMMC || { cat /run/vmm$c.log; fail "clone $c cordon-vmm exit status"; }
  [ -s /run/g$c.log ] && sed 's/^/NESTED: clone '$c' console: /' /run/g$c.log | grep entropy
  return 0
}

# The entropy verdict over the boot's reply (/run/reply1) and the two clones' (2, 3).
check_entropy() {
  r1=$(cat /run/reply1) r2=$(cat /run/reply2) r3=$(cat /run/reply3)
  g1=$(field "$r1" gen) g2=$(field "$r2" gen) g3=$(field "$r3" gen)
  for g in "$g1" "$g2" "$g3"; do
    case "$g" in
      [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]*) ;;
      *) fail "entropy: no generation id in a reply (boot: $r1 / clones: $r2 / $r3)" ;;
    esac
  done
  [ "$(field "$r1" reseeds)" = 1 ] && [ "$(field "$r1" restored)" = 0 ] ||
    fail "entropy: boot did not reseed once with restored=0: $r1"
  for c in 2 3; do
    r=$(cat /run/reply$c)
    [ "$(field "$r" reseeds)" = 2 ] && [ "$(field "$r" restored)" = 1 ] ||
      fail "entropy: clone $c did not reseed for its restore before answering: $r"
  done
  [ "$g2" != "$g1" ] || fail "entropy: clone 2 reports the boot's generation $g1"
  [ "$g3" != "$g1" ] || fail "entropy: clone 3 reports the boot's generation $g1"
  [ "$g2" != "$g3" ] || fail "entropy: both clones report generation $g2"
  echo "NESTED-ENTROPY: generations: boot $g1, clone 2 $g2, clone 3 $g3 (all different)"
  echo "NESTED-ENTROPY: RNDRESEEDCRNG: boot $(field "$r1" crng_reseed), clones $(field "$r2" crng_reseed) $(field "$r3" crng_reseed) (1 = done)"
  x2=$(field "$r2" random) x3=$(field "$r3" random)
  [ -n "$x2" ] && [ "$x2" != error ] && [ "$x2" != "$x3" ] ||
    fail "entropy: the clones' getrandom() after reseed are equal or missing: $x2 / $x3"
  echo "NESTED-ENTROPY: getrandom() after reseed: clone 2 $x2, clone 3 $x3 (different)"
  p2=$(field "$r2" pre) p3=$(field "$r3" pre)
  if [ -n "$p2" ] && [ "$p2" = "$p3" ]; then
    echo "NESTED-ENTROPY: control: getrandom() before the agent's check: EQUAL in both clones ($p2): the snapshot carried the CRNG state, the reseed is what separates them"
  else
    echo "NESTED-ENTROPY: control: getrandom() before the agent's check: different ($p2 / $p3): the guest kernel already diverged on its own, most likely by its own scheduled CRNG reseed (every uptime/2 in its first 2 min, 60 s later) from an input pool that differs per clone; timing-dependent, no guarantee: the agent's reseed is what is required (fresh: $(field "$r2" fresh) $(field "$r3" fresh))"
  fi
}

run_test() {
  nested_tool mktap tap0 || fail "mktap"
  ip addr add 10.0.2.1/24 dev tap0 || fail "tap address"
  ip link set tap0 up || fail "tap up"

  nested_tool udp-recv 10.0.2.1 7001 300000 > /run/net.log 2>&1 &
  NETPID=$!
  nested_tool uds-accept /run/v1.sock_7000 300000 > /run/vsock.log 2>&1 &
  VSPID=$!
  sleep 0.2

  t0=$(nested_tool now)
  cordon-vmm --kernel $K --initrd $I --mem-mib $GMEM --cmdline "$GCMD" --rng \
    --vsock-uds /run/v1.sock --tap tap0 --api-sock /run/api1.sock --serial /run/g1.log \
    > /run/vmm1.log 2>&1 &
  VMM=$!
  if ! t1=$(nested_tool wait-file /run/g1.log CORDON-GUEST-INIT 300000); then
    echo "--- guest console:"; cat /run/g1.log; echo "--- cordon-vmm:"; cat /run/vmm1.log
    fail "guest init not reached under cordon-vmm"
  fi
  echo "NESTED-BOOT: cordon-vmm monitor start -> guest init: $(ms_since $t0 $t1) ms"

  wait $VSPID || { cat /run/g1.log /run/vmm1.log /run/vsock.log; fail "no vsock report"; }
  echo "NESTED: vsock report: $(cat /run/vsock.log)"
  wait $NETPID || { cat /run/g1.log /run/vmm1.log /run/net.log; fail "no network report"; }
  echo "NESTED: network report: $(cat /run/net.log)"
  nested_tool wait-file /run/g1.log "serving vsock port 7002" 30000 > /dev/null ||
    { cat /run/g1.log; fail "guest does not serve vsock 7002"; }

  r=$(nested_tool vsock-connect /run/v1.sock 7002 "PING 1" 20000) ||
    { cat /run/g1.log /run/vmm1.log; fail "vsock ping before snapshot"; }
  echo "NESTED: before snapshot: $r"
  case "$r" in "PONG 1 "*) ;; *) fail "unexpected reply before snapshot: $r" ;; esac
  echo "$r" > /run/reply1
  grep entropy /run/g1.log | sed 's/^/NESTED: guest console: /'
  echo "NESTED: status: $(nested_tool api /run/api1.sock '{"cmd":"status"}' 5000)"

  ts0=$(nested_tool now)
  nested_tool api /run/api1.sock '{"cmd":"snapshot","path":"/run/snap"}' 300000 ||
    fail "snapshot request"
  ts1=$(nested_tool now)
  echo "NESTED-SNAPSHOT: ${GMEM} MiB guest in $(ms_since $ts0 $ts1) ms ($(ls -l /run/snap | tr '\n' ' '))"
  nested_tool api /run/api1.sock '{"cmd":"stop"}' 10000 > /dev/null || fail "stop request"
  wait $VMM || { cat /run/vmm1.log; fail "cordon-vmm exit status $?"; }

  # Two clones of the one snapshot, one after the other (same TAP). Each must report a new
  # entropy generation (not the boot's, not the other clone's), 2 reseeds (boot + its restore)
  # and getrandom() bytes that differ from the other clone's.
  restore_clone 2
  restore_clone 3
  check_entropy
  rm -rf /run/snap
}

# The guest kernel's own clock at init (CLOCK_BOOTTIME, printed by guest_init), in ms: separates
# the guest kernel's boot from the monitor's part of the interval.
guest_uptime() {
  sed -n 's/.*CORDON-GUEST-INIT uptime=\([0-9.]*\).*/\1/p' "$1" | head -1 |
    awk '{ printf "%.0f", $1 * 1000 }'
}

# One boot to guest init and back out (the guest reboots at once with cordon.mode=bench).
bench_cordon() {
  rm -f /run/b.log
  echo "NESTED: bench run $n: cordon-vmm" > /dev/console
  : > /run/b.log
  [ "$VERBOSE" = 1 ] && { tail -f /run/b.log > /dev/console & TAILPID=$!; }
  t0=$(nested_tool now)
  cordon-vmm --kernel $K --initrd $I --mem-mib $GMEM --cmdline "$GCMD cordon.mode=bench" \
    --serial /run/b.log > /run/bvmm.log 2>&1 &
  pid=$!
  t1=$(nested_tool wait-file /run/b.log CORDON-GUEST-INIT 300000) ||
    { cat /run/b.log /run/bvmm.log >&2; fail "bench: cordon-vmm did not reach guest init"; }
  wait $pid
  t2=$(nested_tool now)
  [ "$VERBOSE" = 1 ] && kill $TAILPID
  [ -s /run/bvmm.log ] && cat /run/bvmm.log >&2
  echo "$(ms_since $t0 $t1) $(ms_since $t0 $t2) $(guest_uptime /run/b.log)"
}

bench_qemu() {
  rm -f /run/q.log
  echo "NESTED: bench run $n: qemu-microvm" > /dev/console
  : > /run/q.log
  [ "$VERBOSE" = 1 ] && { tail -f /run/q.log > /dev/console & TAILPID=$!; }
  t0=$(nested_tool now)
  qemu-system-x86_64 -M microvm -accel kvm -cpu host -smp 1 -m $GMEM -nodefaults \
    -no-user-config -display none -no-reboot -serial file:/run/q.log \
    -kernel $K -initrd $I -append "$GCMD cordon.mode=bench" > /run/bqemu.log 2>&1 &
  pid=$!
  t1=$(nested_tool wait-file /run/q.log CORDON-GUEST-INIT 300000) ||
    { cat /run/q.log /run/bqemu.log >&2; fail "bench: qemu did not reach guest init"; }
  # microvm has no i8042, so the guest's reboot=k cannot end QEMU: end it here.
  kill -9 $pid
  wait $pid
  t2=$(nested_tool now)
  [ "$VERBOSE" = 1 ] && { kill $TAILPID; cat /run/bqemu.log >&2; }
  echo "$(ms_since $t0 $t1) $(ms_since $t0 $t2) $(guest_uptime /run/q.log)"
}

run_bench() {
  if ! command -v qemu-system-x86_64 > /dev/null; then
    echo "NESTED-BENCH: SKIPPED (no qemu-system-x86_64 in the inner initramfs)"
    return
  fi
  : > /run/cv.txt
  : > /run/qv.txt
  n=1
  while [ $n -le $RUNS ]; do
    c=$(bench_cordon) || exit 1
    q=$(bench_qemu) || exit 1
    set -- $c $q
    echo "NESTED-BOOT-RUN $n: cordon-vmm $1 ms (guest kernel $3 ms, exit at $2 ms), qemu-microvm $4 ms (guest kernel $6 ms, killed at $5 ms)"
    echo "$1" >> /run/cv.txt
    echo "$4" >> /run/qv.txt
    n=$((n + 1))
  done
  cm=$(sort -n /run/cv.txt | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  qm=$(sort -n /run/qv.txt | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  echo "NESTED-BOOT: cordon-vmm median monitor start -> guest init: $cm ms ($RUNS runs)"
  echo "NESTED-BOOT: qemu-microvm median monitor start -> guest init: $qm ms ($RUNS runs)"
  echo "NESTED-BOOT: ratio cordon-vmm / qemu-microvm: $(awk -v a=$cm -v b=$qm 'BEGIN { printf "%.2f", a / b }') (goal <= 0.80)"
}

case "$MODE" in
  test) run_test ;;
  bench) run_bench ;;
  both) run_test; run_bench ;;
  *) fail "unknown nested.mode=$MODE" ;;
esac
finish PASS
