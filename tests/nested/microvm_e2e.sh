#!/bin/bash
# The microVM sandbox backend end to end, nested (README.md "microvm mode"): the inner machine
# (Debian cloud kernel with kvm-amd under qemu-system-x86_64 -accel tcg -cpu max) runs
# microvm_driver, which drives sandbox/microvm's backend: a template boot + snapshot, two clones
# of it in their own network namespaces, commands through the agent over vsock, HTTP from the
# guest through TAP -> bridge -> veth, pause/resume, destroy. With --cordon and --upstream it
# also runs `cordon serve` (steering on) and a fake upstream in the inner machine, and the guest's
# HTTPS goes through the gateway (unless NESTED_MICROVM_GATEWAY=0 in the environment), then the
# same through `cordon serve --sandboxes` and the `cordon sandbox` CLI (unless NESTED_MICROVM_CLI=0).
# Exit: 0 pass, 1 fail, 77 skipped.
#
# usage: microvm_e2e.sh --work DIR --vmm CORDON_VMM_STATIC --init CORDON_MICROVM_INIT
#                       --agent CORDON_AGENT --driver MICROVM_DRIVER [--timeout SECONDS]
#                       [--cordon CORDON --upstream CORDON_FAKE_UPSTREAM]
#                       [--bench ROUNDS [--concurrency N]]   (the driver's bench mode instead,
#                                                           bench/sandbox/microvm_nested.sh)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
work="" vmm="" init="" agent="" driver="" timeout_s=840 bench_cmdline="" cordon="" upstream=""
while [ $# -gt 0 ]; do
  case "$1" in
    --work) work=$2; shift 2 ;;
    --vmm) vmm=$2; shift 2 ;;
    --init) init=$2; shift 2 ;;
    --agent) agent=$2; shift 2 ;;
    --driver) driver=$2; shift 2 ;;
    --cordon) cordon=$2; shift 2 ;;
    --upstream) upstream=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --bench) bench_cmdline="$bench_cmdline microvm.bench=$2"; shift 2 ;;
    --concurrency) bench_cmdline="$bench_cmdline microvm.bench_conc=$2"; shift 2 ;;
    *) echo "microvm_e2e.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for v in work vmm init agent driver; do
  [ -n "${!v}" ] || { echo "microvm_e2e.sh: --$v is required" >&2; exit 2; }
  [ "$v" = work ] || [ -x "${!v}" ] || { echo "microvm_e2e.sh: ${!v} is not built" >&2; exit 1; }
done

skip() { echo "SKIPPED: $*"; exit 77; }
log() { echo "microvm-nested: $*"; }
# The gateway part (cordon serve + the fake upstream in the inner machine); not in bench mode.
gateway=0
if [ -n "$cordon" ] && [ -n "$upstream" ] && [ -z "$bench_cmdline" ] &&
  [ "${NESTED_MICROVM_GATEWAY:-1}" != 0 ]; then
  for b in "$cordon" "$upstream"; do
    [ -x "$b" ] || { echo "microvm_e2e.sh: $b is not built" >&2; exit 1; }
  done
  gateway=1
fi

[ "$(id -u)" -eq 0 ] || skip "needs root (mkfs of the guest image as root-owned files)"
need_pkgs=()
command -v qemu-system-x86_64 > /dev/null || need_pkgs+=(qemu-system-x86)
[ -x /bin/busybox ] && file -L /bin/busybox 2> /dev/null | grep -q 'statically linked' ||
  need_pkgs+=(busybox-static)
command -v cpio > /dev/null || need_pkgs+=(cpio)
command -v mkfs.ext4 > /dev/null || need_pkgs+=(e2fsprogs)
command -v ip > /dev/null || need_pkgs+=(iproute2)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing ${need_pkgs[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need_pkgs[@]}" \
    > "$work/apt.log" 2>&1 || skip "cannot install ${need_pkgs[*]} (see $work/apt.log)"
fi

# --- the guest kernel package (as nested_boot.sh) -------------------------------------------
mkdir -p "$work/cache"
cache=$(cd "$work/cache" && pwd)
kpkg=$(apt-cache depends linux-image-cloud-amd64 2> /dev/null |
  awk '/Depends: linux-image-[0-9]/ { print $2; exit }') || true
if [ -z "$kpkg" ]; then
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
mod() {
  local n=$1 p
  p=$(find "$modroot" \( -name "$n.ko" -o -name "${n//_/-}.ko" -o -name "${n//-/_}.ko" \) | head -1)
  [ -n "$p" ] || { echo "microvm_e2e.sh: module $n not in $kpkg" >&2; exit 1; }
  echo "$p"
}
# A binary and the shared libraries it loads, copied to the same paths under a root.
copy_with_libs() {
  local bin=$1 root=$2 dest=${3:-$1}
  mkdir -p "$root$(dirname "$dest")"
  cp -L "$bin" "$root$dest"
  ldd "$bin" 2> /dev/null | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

out="$work/microvm-run"
rm -rf "$out"
mkdir -p "$out"
# The gateway's state (master key, vault) never outlives the run, even a failed one.
trap 'rm -rf "$out/gw" "$out/inner/gw" "$out/cordon.stripped" "$out/inner.cpio"' EXIT

# --- guest initramfs: cordon-microvm-init + the virtio modules --------------------------------
g="$out/guest-initrd"
mkdir -p "$g/lib/modules" "$g/dev" "$g/proc" "$g/sys"
cp "$init" "$g/init"
for m in virtio_ring virtio virtio_mmio failover net_failover virtio_net virtio_blk vsock \
  vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport virtio-rng; do
  cp "$(mod $m)" "$g/lib/modules/$m.ko"
done
(cd "$g" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$out/guest-initrd.cpio"

# --- the gateway's state, made here: the CA (the template trusts its root), the vault's secret,
# the rules, the fake internet's certificate (its own CA, as scripts/lib/sandbox_net.sh) --------
gw="$out/gw"
if [ "$gateway" = 1 ]; then
  . "$here/../../scripts/lib/test_pki.sh"
  mkdir -p "$gw"
  secret="ghp_NESTED_SECRET_$$_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
  (
    export CORDON_HOME="$gw/state"
    "$cordon" init > "$gw/init.log" 2>&1 || { echo "cordon init: $(cat "$gw/init.log")" >&2; exit 1; }
    printf '%s' "$secret" | "$cordon" vault put gh-pat --stdin > /dev/null
    "$cordon" ca export > "$gw/root.pem"
  ) || { echo "microvm-nested: FAIL: the gateway's state"; exit 1; }
  printf '%s' "$secret" > "$gw/secret"
  # How cordon-fake-upstream echoes a credential header to the client: sha256, first 8 bytes.
  printf 'sha256:%s\n' "$(printf 'Bearer %s' "$secret" | sha256sum | cut -c1-16)" > "$gw/fingerprint"
  make_upstream_cert "$gw" "nested internet CA" api.allowed.test api.denied.test ||
    { echo "microvm-nested: FAIL: the upstream's certificate"; exit 1; }
  cp "$here/../../scripts/lib/agent_rules.yaml" "$gw/rules.yaml" ||
    { echo "microvm-nested: FAIL: the rules"; exit 1; }
fi

# --- the template's root file system as an ext4 image: busybox, the agent, two users ---------
# (with the gateway also curl and its libraries, and the cordon root CA: busybox's own TLS offers
# only CBC suites with SHA-1 signatures, which OpenSSL 3's default security level refuses)
r="$out/rootfs"
mkdir -p "$r"/{bin,dev,proc,sys,run,tmp,root,home/user,etc/cordon,usr/local/bin}
chmod 1777 "$r/tmp"
cp /bin/busybox "$r/bin/busybox"
for a in $(/bin/busybox --list); do [ -e "$r/bin/$a" ] || ln -s busybox "$r/bin/$a"; done
copy_with_libs "$agent" "$r" /usr/local/bin/cordon-agent
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' > "$r/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\n' > "$r/etc/group"
chown 1000:1000 "$r/home/user"
image_size=64M
if [ "$gateway" = 1 ]; then
  command -v curl > /dev/null || skip "no curl on this machine for the template image"
  copy_with_libs "$(command -v curl)" "$r" /usr/bin/curl
  cp "$gw/root.pem" "$r/etc/cordon/ca.pem"
  printf 'hosts: files dns\n' > "$r/etc/nsswitch.conf"
  image_size=128M
fi
image="$out/rootfs.ext4"
mkfs.ext4 -q -F -L cordon-tpl -E lazy_itable_init=0,lazy_journal_init=0 -d "$r" "$image" $image_size

# --- inner initramfs ---------------------------------------------------------------------------
in="$out/inner"
mkdir -p "$in"/{bin,lib/modules,guest,dev,proc,sys,run,tmp,etc,www,work}
cp /bin/busybox "$in/bin/busybox"
cp "$here/microvm_inner.sh" "$in/init"
chmod 755 "$in/init"
cp "$vmm" "$in/bin/cordon-vmm"
copy_with_libs "$driver" "$in" /bin/microvm_driver
copy_with_libs "$(command -v ip)" "$in" /usr/sbin/ip
for m in irqbypass kvm kvm-amd tun llc stp bridge veth; do cp "$(mod $m)" "$in/lib/modules/$m.ko"; done
cp "$kernel" "$in/guest/vmlinuz"
cp "$out/guest-initrd.cpio" "$in/guest/initrd.cpio"
cp "$image" "$in/guest/rootfs.ext4"
echo cordon-nested-http-ok > "$in/www/ok"
if [ "$gateway" = 1 ]; then
  # Without debug information (the RelWithDebInfo binary is ~200 MiB; the initramfs is in RAM).
  objcopy --strip-debug "$cordon" "$out/cordon.stripped"
  copy_with_libs "$out/cordon.stripped" "$in" /bin/cordon
  copy_with_libs "$upstream" "$in" /bin/cordon-fake-upstream
  # tc clsact (sch_ingress) and the bpf classifier for the steering program.
  for m in sch_ingress cls_bpf; do cp "$(mod $m)" "$in/lib/modules/$m.ko"; done
  mkdir -p "$in/gw"
  cp -a "$gw/state" "$in/gw/state"
  cp "$gw/rules.yaml" "$gw/up.pem" "$gw/up.key" "$gw/up-ca.pem" "$gw/secret" "$gw/fingerprint" "$in/gw/"
  cp "$here/microvm_cli.sh" "$in/bin/microvm_cli.sh"
  chmod 755 "$in/bin/microvm_cli.sh"
  bench_cmdline="$bench_cmdline microvm.gateway=1"
  [ "${NESTED_MICROVM_CLI:-1}" = 0 ] || bench_cmdline="$bench_cmdline microvm.cli=1"
fi
(cd "$in" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$out/inner.cpio"
log "guest initrd $(du -h "$out/guest-initrd.cpio" | cut -f1), image $(du -h --apparent-size "$image" | cut -f1), inner $(du -h "$out/inner.cpio" | cut -f1)"

# --- boot: no network device at all (-nic none) ------------------------------------------------
log "booting the inner machine (TCG, -cpu max)"
start=$(date +%s)
set +e
# The CLI path's sandboxes have the manager's default 512 MiB of guest RAM: more room then.
inner_mib=2048
[ "$gateway" = 1 ] && [ "${NESTED_MICROVM_CLI:-1}" != 0 ] && inner_mib=3072
timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m $inner_mib \
  -nographic -no-reboot -nic none -kernel "$kernel" -initrd "$out/inner.cpio" \
  -append "console=ttyS0 quiet panic=-1${bench_cmdline} ${NESTED_EXTRA_CMDLINE:-}" \
  < /dev/null 2>&1 | tee "$out/console.log" | sed -u -e 's/\r//g' -e '/^\s*$/d'
qrc=${PIPESTATUS[0]}
set -e
log "outer QEMU exited with $qrc after $(($(date +%s) - start)) s"
# The gateway's state holds a master key and a secret: nothing of it stays in the build tree.
rm -rf "$gw" "$in/gw" "$out/cordon.stripped" "$out/inner.cpio"
if grep -aq 'MICROVM-RESULT: PASS' "$out/console.log"; then
  if [ "$gateway" = 1 ] && ! grep -aq 'MICROVM-GATEWAY: PASS' "$out/console.log"; then
    echo "microvm-nested: FAIL: the gateway checks did not run"
    exit 1
  fi
  if [ "$gateway" = 1 ] && [ "${NESTED_MICROVM_CLI:-1}" != 0 ] &&
    ! grep -aq 'MICROVM-CLI: PASS' "$out/console.log"; then
    echo "microvm-nested: FAIL: the CLI path (microvm_cli.sh) did not pass"
    exit 1
  fi
  exit 0
fi
[ "$qrc" -eq 124 ] && echo "microvm-nested: FAIL: timed out after $timeout_s s"
echo "microvm-nested: FAIL (console in $out/console.log)"
exit 1
