#!/bin/bash
# Installs what the microVM backend boots (microvm_backend.h): the guest kernel and an initramfs
# of cordon-microvm-init plus that kernel's virtio modules, as <state>/microvm/vmlinuz and
# <state>/microvm/initrd.cpio (microvm_default_options). The kernel is Debian's cloud kernel,
# installed (linux-image-cloud-amd64) or unpacked from its package (dpkg -x).
#
# usage: make_initrd.sh --init CORDON_MICROVM_INIT --kernel VMLINUZ --modules LIB_MODULES_VER_DIR
#                       --state STATE_DIR
set -euo pipefail
init="" kernel="" modules="" state=""
while [ $# -gt 0 ]; do
  case "$1" in
    --init) init=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    --modules) modules=$2; shift 2 ;;
    --state) state=$2; shift 2 ;;
    *) echo "make_initrd.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for v in init kernel modules state; do
  [ -n "${!v}" ] || { echo "make_initrd.sh: --$v is required" >&2; exit 2; }
done
command -v cpio > /dev/null || { echo "make_initrd.sh: cpio is missing (apt-get install cpio)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib/modules" "$tmp/dev" "$tmp/proc" "$tmp/sys"
cp "$init" "$tmp/init"
# The load order of cordon-microvm-init (no modules.dep ships with Debian's cloud kernel).
for m in virtio_ring virtio virtio_mmio failover net_failover virtio_net virtio_blk vsock \
  vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport virtio-rng; do
  p=$(find "$modules" \( -name "$m.ko" -o -name "${m//_/-}.ko" -o -name "${m//-/_}.ko" \) | head -1)
  [ -n "$p" ] || { echo "make_initrd.sh: module $m not under $modules (built in?)" >&2; continue; }
  cp "$p" "$tmp/lib/modules/$m.ko"
done
mkdir -p "$state/microvm"
(cd "$tmp" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$state/microvm/initrd.cpio.tmp"
mv "$state/microvm/initrd.cpio.tmp" "$state/microvm/initrd.cpio"
cp "$kernel" "$state/microvm/vmlinuz.tmp" && mv "$state/microvm/vmlinuz.tmp" "$state/microvm/vmlinuz"
echo "make_initrd.sh: $state/microvm/vmlinuz and $state/microvm/initrd.cpio"
