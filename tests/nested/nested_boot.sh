#!/bin/bash
# The nested real-Linux boot (issue 6, second test layer; README.md beside this file).
#
# Builds, from Debian packages only, an inner initramfs (busybox, kvm-amd, the static cordon-vmm,
# QEMU for the comparison, the guest kernel and guest initramfs) and boots it under
# qemu-system-x86_64 -accel tcg -cpu max (an AMD model with SVM, so the inner kernel's kvm_amd
# works). Inside, inner_init.sh boots the unmodified Debian cloud kernel with cordon-vmm (and with
# QEMU -M microvm in bench mode). Exit status: 0 pass, 1 fail, 77 skipped (with the reason).
#
# usage: nested_boot.sh --work DIR --vmm CORDON_VMM_STATIC --guest-init BIN --tool BIN
#                       [--mode test|bench|both] [--runs N] [--timeout SECONDS]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
work="" vmm="" guest_init="" tool="" mode=test runs=1 timeout_s=600
while [ $# -gt 0 ]; do
  case "$1" in
    --work) work=$2; shift 2 ;;
    --vmm) vmm=$2; shift 2 ;;
    --guest-init) guest_init=$2; shift 2 ;;
    --tool) tool=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    *) echo "nested_boot.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for v in work vmm guest_init tool; do
  [ -n "${!v}" ] || { echo "nested_boot.sh: --${v//_/-} is required" >&2; exit 2; }
done

skip() { echo "SKIPPED: $*"; exit 77; }
log() { echo "nested: $*"; }

for f in "$vmm" "$guest_init" "$tool"; do
  [ -x "$f" ] || { echo "nested_boot.sh: $f is not built" >&2; exit 1; }
done

# --- packages -------------------------------------------------------------------------------
# Debian's busybox-static ships /bin/busybox; qemu-system-x86 the QEMU binary and firmware.
need_pkgs=()
command -v qemu-system-x86_64 > /dev/null || need_pkgs+=(qemu-system-x86)
[ -x /bin/busybox ] && file -L /bin/busybox 2> /dev/null | grep -q 'statically linked' ||
  need_pkgs+=(busybox-static)
command -v cpio > /dev/null || need_pkgs+=(cpio)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then skip "missing packages ${need_pkgs[*]} (and not root to install them)"; fi
  log "installing ${need_pkgs[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need_pkgs[@]}" \
    > "$work/apt.log" 2>&1 || skip "cannot install ${need_pkgs[*]} (see $work/apt.log)"
fi
command -v apt-get > /dev/null && command -v dpkg > /dev/null || skip "no apt-get/dpkg"

mkdir -p "$work/cache"
cache=$(cd "$work/cache" && pwd)
# The kernel package that linux-image-cloud-amd64 currently depends on.
kpkg=$(apt-cache depends linux-image-cloud-amd64 2> /dev/null |
  awk '/Depends: linux-image-[0-9]/ { print $2; exit }') || true
if [ -z "$kpkg" ]; then
  # No package lists (offline, or apt-get update never ran): use what the cache already holds.
  kpkg=$(ls -1 "$cache" 2> /dev/null | grep '^linux-image-.*-cloud-amd64$' | sort -V | tail -1) || true
  [ -n "$kpkg" ] || skip "apt-cache knows no linux-image-cloud-amd64 and nothing is cached"
fi
kdir="$cache/$kpkg"
if [ ! -f "$kdir/.unpacked" ]; then
  log "fetching $kpkg"
  rm -rf "$kdir" "$cache/dl"
  mkdir -p "$cache/dl"
  (cd "$cache/dl" && apt-get download "$kpkg" > "$cache/dl/apt.log" 2>&1) ||
    skip "apt-get download $kpkg failed (see $cache/dl/apt.log)"
  dpkg -x "$cache"/dl/"$kpkg"_*.deb "$kdir"
  rm -rf "$cache/dl"
  touch "$kdir/.unpacked"
fi
kernel=$(ls "$kdir"/boot/vmlinuz-* | head -1)
modroot=$(ls -d "$kdir"/lib/modules/*/kernel | head -1)
log "kernel $kpkg: $kernel"

mod() {  # the path of one module by name (dashes and underscores are interchangeable)
  local n=$1 p
  p=$(find "$modroot" \( -name "$n.ko" -o -name "${n//_/-}.ko" -o -name "${n//-/_}.ko" \) | head -1)
  [ -n "$p" ] || { echo "nested_boot.sh: module $n not in $kpkg" >&2; exit 1; }
  echo "$p"
}

# --- guest (L2) initramfs: guest_init as /init + the virtio modules ------------------------------
out="$work/run"
rm -rf "$out"
mkdir -p "$out/guest/lib/modules" "$out/inner"
cp "$guest_init" "$out/guest/init"
for m in virtio_ring virtio virtio_mmio failover net_failover virtio_net vsock \
  vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport virtio-rng; do
  cp "$(mod $m)" "$out/guest/lib/modules/$m.ko"
done
mkdir -p "$out/guest/dev" "$out/guest/proc" "$out/guest/sys"
(cd "$out/guest" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$out/guest.cpio"

# --- inner (L1) initramfs --------------------------------------------------------------------
in="$out/inner"
mkdir -p "$in/bin" "$in/lib/modules" "$in/guest" "$in/dev" "$in/proc" "$in/sys" "$in/run" "$in/tmp"
cp /bin/busybox "$in/bin/busybox"
cp "$here/inner_init.sh" "$in/init"
chmod 755 "$in/init"
cp "$vmm" "$in/bin/cordon-vmm"
cp "$tool" "$in/bin/nested_tool"
for m in irqbypass kvm kvm-amd tun; do cp "$(mod $m)" "$in/lib/modules/$m.ko"; done
cp "$kernel" "$in/guest/vmlinuz"
cp "$out/guest.cpio" "$in/guest/initrd.cpio"
if [ "$mode" != test ]; then
  # QEMU for the comparison: the binary, its shared libraries and the microvm firmware.
  qemu=$(command -v qemu-system-x86_64)
  mkdir -p "$in/usr/bin" "$in/usr/share/qemu"
  cp "$qemu" "$in/usr/bin/"
  ldd "$qemu" | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }' | while read -r lib; do
    mkdir -p "$in$(dirname "$lib")"
    cp -L "$lib" "$in$lib"
  done
  for f in bios-microvm.bin qboot.rom linuxboot_dma.bin pvh.bin; do
    [ -e "/usr/share/qemu/$f" ] && cp -L "/usr/share/qemu/$f" "$in/usr/share/qemu/"
  done
fi
(cd "$in" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$out/inner.cpio"
log "initramfs: guest $(du -h "$out/guest.cpio" | cut -f1), inner $(du -h "$out/inner.cpio" | cut -f1)"

# --- boot ----------------------------------------------------------------------------------
# No network device at all (-nic none): nothing may leave toward the real network. -no-reboot
# turns the inner poweroff/panic into a QEMU exit.
log "booting the inner machine (TCG, -cpu max), mode $mode"
start=$(date +%s)
set +e
timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 2048 \
  -nographic -no-reboot -nic none -kernel "$kernel" -initrd "$out/inner.cpio" \
  -append "console=ttyS0 quiet panic=-1 nested.mode=$mode nested.runs=$runs ${NESTED_EXTRA_CMDLINE:-}" \
  < /dev/null 2>&1 | tee "$out/console.log" | sed -u -e 's/\r//g' -e '/^\s*$/d'
qrc=${PIPESTATUS[0]}
set -e
log "outer QEMU exited with $qrc after $(($(date +%s) - start)) s"
if grep -aq 'NESTED-RESULT: PASS' "$out/console.log"; then
  exit 0
fi
if [ "$qrc" -eq 124 ]; then echo "nested: FAIL: timed out after $timeout_s s"; fi
echo "nested: FAIL (console in $out/console.log)"
exit 1
