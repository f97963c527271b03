#!/usr/bin/env bash
# The microVM rows of the sandbox benchmark, nested (README.md "microVM (nested, TCG)"): runs
# tests/nested/microvm_e2e.sh with --bench (the driver's bench mode, on the inner machine's
# kvm-amd under qemu -accel tcg) and prints one table. Every absolute time is TCG-emulated.
#
# usage: bench/sandbox/microvm_nested.sh BUILD_DIR [ROUNDS] [CONCURRENCY]
# BUILD_DIR configured with -DCORDON_NESTED_MICROVM=ON; root (as the nested test).
set -euo pipefail
build=$(realpath "${1:?usage: microvm_nested.sh BUILD_DIR [ROUNDS] [CONCURRENCY]}")
rounds=${2:-10} conc=${3:-4}
[[ "$rounds" =~ ^[0-9]+$ && "$rounds" -ge 1 && "$rounds" -le 1000 ]] ||
  { echo "microvm_nested.sh: ROUNDS must be 1..1000, got '$rounds'" >&2; exit 2; }
[[ "$conc" =~ ^[0-9]+$ && "$conc" -ge 1 && "$conc" -le 16 ]] ||
  { echo "microvm_nested.sh: CONCURRENCY must be 1..16 (one emulated CPU inside), got '$conc'" >&2; exit 2; }
command -v jq > /dev/null || { echo "microvm_nested.sh: jq is not installed (apt-get install jq)" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
e2e="$here/../../tests/nested/microvm_e2e.sh"

ninja -C "$build" -j2 nested_microvm_deps > /dev/null ||
  { echo "microvm_nested.sh: building nested_microvm_deps in $build failed" >&2; exit 1; }
# The artefacts' paths as the nested_microvm ctest passes them (one source of truth: its command).
cmd=$(ctest --test-dir "$build" -R '^nested_microvm$' --show-only=json-v1 | jq -r '.tests[0].command | @sh')
[ -n "$cmd" ] && [ "$cmd" != null ] ||
  { echo "microvm_nested.sh: $build has no nested_microvm test (-DCORDON_NESTED_MICROVM=ON?)" >&2; exit 1; }
eval "args=($cmd)"
vmm="" init="" agent="" driver=""
for ((i = 1; i + 1 < ${#args[@]}; i += 2)); do
  case "${args[i]}" in
    --vmm) vmm=${args[i + 1]} ;;
    --init) init=${args[i + 1]} ;;
    --agent) agent=${args[i + 1]} ;;
    --driver) driver=${args[i + 1]} ;;
  esac
done

# Its own work dir (the ctest's microvm-run stays), sharing the test's kernel-package cache.
work="$build/tests/nested/bench"
mkdir -p "$work" "$build/tests/nested/cache"
[ -e "$work/cache" ] || ln -s ../cache "$work/cache"
log="$work/bench.log"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
# Template boot ~20-60 s under TCG, a clone 2-10 s: the budget grows with the rounds.
timeout_s=$((900 + 30 * rounds + 60 * conc))
set +e
"$e2e" --work "$work" --vmm "$vmm" --init "$init" --agent "$agent" --driver "$driver" \
  --timeout "$timeout_s" --bench "$rounds" --concurrency "$conc" > "$log" 2>&1
rc=$?
set -e
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$rc" -ne 0 ]; then
  grep -a -E 'SKIPPED|MICROVM-RESULT|FAIL' "$log" | tail -5 >&2 || true
  echo "microvm_nested.sh: the nested run failed (exit $rc); log in $log" >&2
  exit "$rc"
fi

# "MICROVM-BENCH <key> n=.. p50_ms=.. p99_ms=.. create_p50_ms=.." -> the table.
sed -e 's/\r//g' "$log" | awk -v rounds="$rounds" -v conc="$conc" -v started="$started" \
  -v lb="$load_before" -v la="$load_after" '
  function field(k,   i) { for (i = 3; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2); return "" }
  /^MICROVM-BENCH-MEM / { mem = mem (mem == "" ? "" : ", ") substr($2, 9) " VMs running: " substr($3, 19) " MiB" }
  /^MICROVM-BENCH / {
    k = $2; n[k] = field("n"); p50[k] = field("p50_ms"); p99[k] = field("p99_ms"); cr[k] = field("create_p50_ms")
  }
  function row(label, k, ratio) {
    if (!(k in n)) { printf "| %s | missing | | | | |\n", label; return }
    printf "| %s | %s (TCG) | %s (TCG) | %s | %s | %s |\n", label, p50[k], p99[k], n[k],
      (cr[k] + 0 > 0 ? cr[k] " (TCG)" : ""), ratio
  }
  function ratio(k) { return ((k in p50) && p50["template_cold"] + 0 > 0) ? sprintf("%.3f", p50[k] / p50["template_cold"]) : "" }
  END {
    printf "microVM backend, nested: inner Linux + kvm-amd under qemu-system-x86_64 -accel tcg -cpu max\n"
    printf "ALL ABSOLUTE TIMES ARE TCG-EMULATED: they say nothing about this backend on real hardware;\n"
    printf "only the ratios between rows carry over (and those only roughly).\n"
    printf "run %s, %s rounds, concurrency %s, guest 128 MiB, load average before %s, after %s\n\n", started, rounds, conc, lb, la
    printf "| create -> first command output (`echo ready` via the agent) | p50 ms | p99 ms | n | create() p50 ms | x template cold p50 |\n"
    printf "|---|---|---|---|---|---|\n"
    row("template cold: boot + snapshot + first clone restore + SETUP + `/init`", "template_cold", "1.000")
    row("template boot + snapshot alone (cold create() minus clone create() p50; estimate)", "template_boot_snapshot_est", ratio("template_boot_snapshot_est"))
    row("clone from the snapshot, concurrency 1", "clone_c1", ratio("clone_c1"))
    row("clone from the snapshot, concurrency " conc " (at once)", "clone_cN", ratio("clone_cN"))
    row("command in a running clone (no create)", "command_running", ratio("command_running"))
    if ((("clone_c1") in p50) && p50["template_boot_snapshot_est"] + 0 > 0)
      printf "\nclone create -> output p50 / template boot+snapshot (estimate): %.3f\n", p50["clone_c1"] / p50["template_boot_snapshot_est"]
    if (mem != "") printf "inner machine (2 GiB, 1 vCPU) MemAvailable: %s\n", mem
  }'
echo "(nested log: $log)"
