#!/bin/bash
# Nested boot benchmark (issue 6): inside one nested run (outer QEMU TCG -cpu max, inner Debian
# cloud kernel with kvm_amd), the time from monitor start to guest init for cordon-vmm and for
# QEMU -M microvm, side by side, with the same kernel, initramfs, command line and memory, and
# their ratio (goal: cordon-vmm <= 0.8x QEMU). See bench/vmm/README.md.
#
# usage: bench/vmm/nested_boot.sh [BUILD_DIR] [RUNS]     (defaults: ./build, 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
runs=${2:-5}
ninja -C "$build" -j2 nested_deps
work="$build/tests/nested"
exec "$root/tests/nested/nested_boot.sh" --work "$work" \
  --vmm "$build/vmm/cordon-vmm-static" \
  --guest-init "$work/nested_guest_init" --tool "$work/nested_nested_tool" \
  --mode bench --runs "$runs" --timeout $((300 + runs * 120))
