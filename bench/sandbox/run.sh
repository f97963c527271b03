#!/usr/bin/env bash
# Runs the sandbox benchmark and prints its table. Usage: bench/sandbox/run.sh BUILD_DIR [ROUNDS] [CONC]
set -euo pipefail
build=$(realpath "${1:?usage: run.sh BUILD_DIR [ROUNDS] [CONCURRENCY]}")
here=$(cd "$(dirname "$0")" && pwd)
state=${CORDON_SBX_TEMPLATE_STATE:-$("$here/../../tests/e2e/templates/ensure_base.sh" "$build")}
CORDON_SBX_TEMPLATE_STATE=$state "$build/bench/sandbox/cordon-sandbox-bench" "${2:-10}" "${3:-50}"
