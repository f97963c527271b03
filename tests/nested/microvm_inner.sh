#!/bin/busybox sh
# /init of the inner machine (L1) for the microVM backend's nested end-to-end test
# (microvm_e2e.sh): loads kvm-amd and the network modules, mounts what the backend needs
# (/run/netns, cgroup2), serves /www over HTTP on port 8080 for the guests to fetch, runs
# microvm_driver and powers off. With microvm.gateway=1 (microvm_e2e.sh --cordon --upstream) it
# first sets up the fake internet (namespace inet: cordon-fake-upstream on 198.51.100.10:443, a
# plain httpd on :8443, a route back to the sandbox pool and none anywhere else) and runs
# `cordon serve` with the eBPF steering in the inner machine's own namespace, beside the driver;
# with microvm.cli=1 too, once the driver passed, microvm_cli.sh (the manager and the CLI). The
# driver's lines start with "MICROVM"; the last one is "MICROVM-RESULT: PASS" or
# "MICROVM-RESULT: FAIL <why>".
/bin/busybox --install -s /bin
# iproute2's ip first: netns and tuntap are not in busybox's.
export PATH=/usr/sbin:/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs -o mode=755 run /run
mkdir -p /run/netns /sys/fs/cgroup /etc/netns
mount -t cgroup2 cgroup2 /sys/fs/cgroup

finish() {
  echo "MICROVM-RESULT: $*" > /dev/console
  sync
  poweroff -f
  sleep 5
}

for m in irqbypass kvm kvm-amd tun llc stp bridge veth; do
  insmod /lib/modules/$m.ko || finish "FAIL insmod $m"
done
[ -c /dev/kvm ] || finish "FAIL no /dev/kvm after kvm-amd"
echo "MICROVM: inner kernel up at $(cut -d' ' -f1 /proc/uptime) s, kvm_amd npt=$(cat /sys/module/kvm_amd/parameters/npt)"
ip link set lo up
echo 'advise' > /sys/kernel/mm/transparent_hugepage/shmem_enabled
httpd -p 8080 -h /www || finish "FAIL httpd"

# microvm_e2e.sh --bench: microvm.bench=ROUNDS microvm.bench_conc=N select the driver's bench mode.
bench_args=""
gateway=0 cli=0
for w in $(cat /proc/cmdline); do
  case "$w" in
    microvm.bench=*) bench_args="$bench_args --bench ${w#microvm.bench=}" ;;
    microvm.bench_conc=*) bench_args="$bench_args --concurrency ${w#microvm.bench_conc=}" ;;
    microvm.gateway=1) gateway=1 ;;
    microvm.cli=1) cli=1 ;;
  esac
done

# The gateway side (design.md section 6, inside the inner machine): the fake internet has no
# route anywhere but back to the sandbox pool, and the inner machine has no network device.
gw_args=""
if [ $gateway = 1 ]; then
  for m in sch_ingress cls_bpf; do insmod /lib/modules/$m.ko || finish "FAIL insmod $m"; done
  mkdir -p /sys/fs/bpf
  mount -t bpf bpf /sys/fs/bpf || finish "FAIL mount bpffs"
  # iproute2's, by path: this busybox runs its own applets before looking in PATH.
  ip=/usr/sbin/ip
  $ip netns add inet || finish "FAIL netns inet"
  $ip link add up0 type veth peer name down0 netns inet &&
    $ip addr add 198.51.100.1/24 dev up0 && $ip link set up0 up &&
    $ip -n inet addr add 198.51.100.10/24 dev down0 && $ip -n inet link set down0 up &&
    $ip -n inet link set lo up && $ip -n inet route add 10.201.0.0/16 via 198.51.100.1 ||
    finish "FAIL the fake internet's veth"
  # Forwarding on: without the steering the guest would reach 198.51.100.10 directly (the
  # driver checks that first, so the drop it checks afterwards is the steering's).
  echo 1 > /proc/sys/net/ipv4/ip_forward
  nsenter --net=/run/netns/inet /bin/cordon-fake-upstream /gw/up.pem /gw/up.key 198.51.100.10:443 \
    > /run/upstream.jsonl 2> /run/upstream.log &
  nsenter --net=/run/netns/inet httpd -p 198.51.100.10:8443 -h /www || finish "FAIL httpd :8443"
  t_serve=$(cut -d' ' -f1 /proc/uptime)
  CORDON_HOME=/gw/state /bin/cordon serve --rules /gw/rules.yaml \
    --transparent-listen 127.0.0.1:15001 --admin-listen 127.0.0.1:15002 --steering ebpf \
    --resolve api.allowed.test=198.51.100.10 --resolve api.denied.test=198.51.100.10 \
    --upstream-ca /gw/up-ca.pem --no-system-trust --threads 1 2> /run/serve.log &
  serve_pid=$!
  i=0
  until [ -S /gw/state/steering.sock ] && grep -q 'cordon: steering' /run/serve.log; do
    kill -0 $serve_pid 2> /dev/null || { tail -n 40 /run/serve.log; finish "FAIL cordon serve exited"; }
    i=$((i + 1))
    [ $i -le 1200 ] || { tail -n 40 /run/serve.log; finish "FAIL cordon serve not ready in 120 s"; }
    sleep 0.1
  done
  grep -q listening /run/upstream.log || { cat /run/upstream.log; finish "FAIL fake upstream"; }
  echo "MICROVM: cordon serve (steering ebpf) ready after $(awk -v a=$t_serve -v b=$(cut -d' ' -f1 /proc/uptime) 'BEGIN { printf "%.1f", b - a }') s: $(grep 'cordon: steering' /run/serve.log | head -1)"
  gw_args="--gateway-state /gw/state --secret-file /gw/secret --fingerprint-file /gw/fingerprint"
  gw_args="$gw_args --upstream-log /run/upstream.jsonl --upstream-ip 198.51.100.10 --plain-port 8443"
fi

t0=$(cut -d' ' -f1 /proc/uptime)
/bin/microvm_driver --vmm /bin/cordon-vmm --kernel /guest/vmlinuz --initrd /guest/initrd.cpio \
  --image /guest/rootfs.ext4 --work /work/sandboxes --http-port 8080 $gw_args $bench_args \
  > /dev/console 2>&1
rc=$?
echo "MICROVM: driver exited $rc after $(awk -v a=$t0 -v b=$(cut -d' ' -f1 /proc/uptime) 'BEGIN { printf "%.1f", b - a }') s (inner clock)"
if [ $rc -ne 0 ]; then
  for f in /work/sandboxes/*/console.log /work/sandboxes/cache/*/console.log /work/sandboxes/*/vmm.log \
    /work/sandboxes/cache/*/vmm.log; do
    [ -s "$f" ] && { echo "--- $f"; tail -n 120 "$f"; }
  done
  for f in /run/serve.log /run/upstream.log /gw/state/audit/audit.jsonl; do
    [ -s "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
  done
fi
if [ $gateway = 1 ]; then
  kill -TERM $serve_pid 2> /dev/null
  wait $serve_pid
  echo "MICROVM: cordon serve stopped (exit $?)"
  # Then the same through the manager and the CLI (microvm_cli.sh starts its own serve).
  if [ $rc -eq 0 ] && [ $cli = 1 ]; then
    t0=$(cut -d' ' -f1 /proc/uptime)
    /bin/microvm_cli.sh > /dev/console 2>&1
    echo "MICROVM: microvm_cli.sh exited $? after $(awk -v a=$t0 -v b=$(cut -d' ' -f1 /proc/uptime) 'BEGIN { printf "%.1f", b - a }') s (inner clock)"
  fi
fi
# The driver printed its own MICROVM-RESULT line; power off either way.
sync
poweroff -f
sleep 5
