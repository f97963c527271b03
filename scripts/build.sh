#!/usr/bin/env bash
# Configures and builds one flavour of cordon. Usage: scripts/build.sh [release|asan|fuzz]
# Build trees: build/ (release), build-asan/ (ASan+UBSan), build-fuzz/ (clang + libFuzzer).
set -euo pipefail
cd "$(dirname "$0")/.."

flavour=${1:-release}
jobs=${CORDON_JOBS:-$(nproc)}
case "$flavour" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DCORDON_SANITIZE=ON -DCORDON_BENCH=OFF) ;;
  fuzz) dir=build-fuzz; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCORDON_FUZZ=ON -DCORDON_BENCH=OFF
                               -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;;
  *) echo "build.sh: unknown flavour '$flavour' (release, asan, fuzz)" >&2; exit 2 ;;
esac

# ccache, when installed, makes rebuilds in a fresh clone (CI, a second flavour) cheap.
if command -v ccache >/dev/null 2>&1; then
  flags+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
fi
if [ "$flavour" = fuzz ]; then
  # Only the fuzzers: their targets are named fuzz_*.
  targets=$(ninja -C "$dir" -t targets all 2>/dev/null | awk -F: '$1 ~ /^tests\/fuzz\/[^\/]+\/fuzz_[a-z0-9_]+$/ {print $1}')
  [ -z "$targets" ] || ninja -C "$dir" -j "$jobs" $targets
else
  ninja -C "$dir" -j "$jobs"
fi
