#!/bin/busybox sh
# /init of the inner machine (L1) for the microVM backend's nested end-to-end test
# (microvm_e2e.sh): loads kvm-amd and the network modules, mounts what the backend needs
# (/run/netns, cgroup2), serves /www over HTTP on port 8080 for the guests to fetch, runs
# microvm_driver and powers off. The driver's lines start with "MICROVM"; the last one is
# "MICROVM-RESULT: PASS" or "MICROVM-RESULT: FAIL <why>".
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
for w in $(cat /proc/cmdline); do
  case "$w" in
    microvm.bench=*) bench_args="$bench_args --bench ${w#microvm.bench=}" ;;
    microvm.bench_conc=*) bench_args="$bench_args --concurrency ${w#microvm.bench_conc=}" ;;
  esac
done

t0=$(cut -d' ' -f1 /proc/uptime)
/bin/microvm_driver --vmm /bin/cordon-vmm --kernel /guest/vmlinuz --initrd /guest/initrd.cpio \
  --image /guest/rootfs.ext4 --work /work/sandboxes --http-port 8080 $bench_args > /dev/console 2>&1
rc=$?
echo "MICROVM: driver exited $rc after $(awk -v a=$t0 -v b=$(cut -d' ' -f1 /proc/uptime) 'BEGIN { printf "%.1f", b - a }') s (inner clock)"
if [ $rc -ne 0 ]; then
  for f in /work/sandboxes/*/console.log /work/sandboxes/cache/*/console.log /work/sandboxes/*/vmm.log \
    /work/sandboxes/cache/*/vmm.log; do
    [ -s "$f" ] && { echo "--- $f"; tail -n 120 "$f"; }
  done
fi
# The driver printed its own MICROVM-RESULT line; power off either way.
sync
poweroff -f
sleep 5
