#!/usr/bin/env bash
# Installs the Debian packages cordon builds and tests with. Idempotent: does nothing (and needs
# no network) when everything is already there. Run as root on Debian 12.
#   --bench  also the peers of the benchmarks (bench/gateway/peers.sh): nginx, Squid, mitmproxy,
#            wrk, h2load. Not needed to build or test.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build clang llvm lld pkg-config git ccache
  # libraries (design.md, DEVELOPERS.md)
  libssl-dev libnghttp2-dev libbpf-dev bpftool libboost-dev libsqlite3-dev libspdlog-dev
  libyaml-cpp-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
  node-llhttp libclang-rt-14-dev acpica-tools
  # test and demo tools: namespaces, steering, clients
  iproute2 nftables curl openssl ca-certificates procps psmisc util-linux dnsutils
  # the nested real-Linux boot test (tests/nested): outer QEMU, inner userland, initramfs
  qemu-system-x86 busybox-static cpio
  # sandbox templates (sandbox/templates): the rootfs builder and the ext4 tools
  mmdebstrap e2fsprogs
  # the agent's protobuf messages; gVisor (node 20 and npm, for the real E2B SDK, come with the machine)
  libprotobuf-dev protobuf-compiler runsc
  # HTTP/2 test clients and a test h2 server (nghttp, h2load, nghttpd)
  nghttp2-client nghttp2-server
)
if [ "${1:-}" = "--bench" ]; then
  packages+=(nginx squid-openssl mitmproxy wrk nghttp2-client python3)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
