#!/bin/sh
# Keep-alive HTTPS throughput and latency, direct vs through cordon, side by side in one run.
# Builds the driver (bench/gateway/gateway_throughput.cc) in BUILD_DIR and runs it; all traffic
# stays on loopback inside the one process (fake upstream, gateway, client threads).
# Usage: bench/gateway/run.sh [BUILD_DIR] [--seconds S] [--conns N] [--sizes 1024,65536] [--threads T]
set -eu
BUILD=${1:-build}
[ $# -gt 0 ] && shift
ninja -C "$BUILD" -j2 gateway_throughput >/dev/null
exec "$BUILD/bench/gateway/gateway_throughput" "$@"
