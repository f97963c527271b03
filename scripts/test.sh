#!/usr/bin/env bash
# Runs every cordon test: installs what is missing, builds, then
#   1. all ctest tests of the release build (unit, integration, end-to-end, vmm, nested),
#   2. the unit tests again under ASan+UBSan,
#   3. each libFuzzer target briefly over its committed seed corpus.
# Ends with one summary line "N passed, N failed, N skipped" and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh || exit 1

passed=0 failed=0 skipped=0 broken=0
fuzz_seconds=${CORDON_FUZZ_SECONDS:-20}

# Adds a ctest log's counts to the totals.
count_ctest() {
  local log=$1 total fail skip
  total=$(sed -n 's/.*tests failed out of \([0-9]\+\).*/\1/p' "$log" | tail -1)
  fail=$(sed -n 's/.*tests passed, \([0-9]\+\) tests\? failed out of.*/\1/p' "$log" | tail -1)
  skip=$(grep -c '\*\*\*Skipped\|Not Run' "$log" || true)
  if [ -z "$total" ]; then
    echo "test.sh: ctest printed no summary in $log" >&2
    broken=$((broken + 1))
    return
  fi
  fail=${fail:-0}
  passed=$((passed + total - fail - skip))
  failed=$((failed + fail))
  skipped=$((skipped + skip))
}

echo "== build (release)"
if ! bash scripts/build.sh release; then echo "test.sh: release build failed" >&2; broken=$((broken + 1)); fi

echo "== ctest (release: every test)"
ctest --test-dir build --output-on-failure -j "${CORDON_JOBS:-2}" --timeout 900 2>&1 | tee build/ctest.log
count_ctest build/ctest.log
grep -h -A1 '\[  SKIPPED \]' build/ctest.log 2>/dev/null | grep -v '^\[  SKIPPED \] [0-9]' | sort -u | head -40 || true

echo "== build (ASan+UBSan)"
if ! bash scripts/build.sh asan; then echo "test.sh: sanitizer build failed" >&2; broken=$((broken + 1)); fi
echo "== ctest (ASan+UBSan: unit tests)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j "${CORDON_JOBS:-2}" --timeout 900 2>&1 | tee build-asan/ctest.log
count_ctest build-asan/ctest.log

echo "== fuzz (${fuzz_seconds}s per target)"
if bash scripts/build.sh fuzz; then
  for bin in build-fuzz/tests/fuzz/*/fuzz_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin"); target=${name#fuzz_}
    corpus_src=tests/fuzz/$target/corpus
    work=$(mktemp -d)
    [ -d "$corpus_src" ] && cp -r "$corpus_src"/. "$work"/
    extra=()
    [ -f "tests/fuzz/$target/dict" ] && extra+=(-dict="tests/fuzz/$target/dict")
    if "$bin" "$work" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -print_final_stats=1 \
         -artifact_prefix="$work/" "${extra[@]}" >"$work/log" 2>&1; then
      echo "fuzz $target: passed ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/log" | awk '{print $2}') runs)"
      passed=$((passed + 1))
    else
      echo "fuzz $target: FAILED"; tail -40 "$work/log"
      failed=$((failed + 1))
    fi
    rm -rf "$work"
  done
else
  echo "test.sh: fuzz build failed" >&2; broken=$((broken + 1))
fi

echo
# CI shows only the end of this output: name what failed here, where it is seen.
for log in build/ctest.log build-asan/ctest.log; do
  [ -f "$log" ] || continue
  sed -n '/The following tests FAILED:/,/^Errors while running/p' "$log" | sed "s|^|$log: |"
done
# A failure's own output, once more at the end (a second run; it does not change the counts).
if grep -q 'The following tests FAILED:' build/ctest.log 2>/dev/null; then
  echo "== the release failures run again, with their output (counts above stand)"
  ctest --test-dir build --rerun-failed --output-on-failure --timeout 900 2>&1 | tail -120
fi
echo "skipped tests are listed above with their reasons; a skip is not a pass."
echo "total: $passed passed, $((failed + broken)) failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$broken" -eq 0 ]
