#!/usr/bin/env bash
# Builds the `fuzz` preset (clang, libFuzzer, AddressSanitizer + UndefinedBehaviorSanitizer) and
# runs each fuzz target of tests/fuzz for a bounded time, one after another.
#
#   tools/dev/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, every target)
#
# A target starts from its committed corpus (tests/fuzz/corpus/TARGET) and grows a working copy
# in build/fuzz/corpus/TARGET. Every input that crashes, trips a sanitizer, times out or runs
# out of memory is saved under build/fuzz/findings/TARGET/, with the fuzzer's log (stacks
# included) in build/fuzz/logs/TARGET.log. The script lists the findings and exits 1 when there
# are any. To keep a finding as a regression input, fix it and copy the file into
# tests/fuzz/corpus/TARGET/: every build replays that folder (ctest -R fuzz).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds="${1:-60}"
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] || {
  echo "fuzz.sh: SECONDS_PER_TARGET must be a positive whole number, not '$seconds'" >&2
  exit 2
}
shift $(( $# > 0 ? 1 : 0 ))
all=(config checkpoint_manifest checkpoint_shards idx token_file tcp_store)
targets=("${@:-${all[@]}}")
for t in "${targets[@]}"; do
  [[ -d "tests/fuzz/corpus/$t" ]] || { echo "fuzz.sh: no target '$t' (known: ${all[*]})" >&2; exit 2; }
done

command -v clang++ >/dev/null || {
  echo "fuzz.sh: clang++ is missing: run tools/dev/install-deps.sh (package clang)" >&2
  exit 2
}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -- -j"${FUZZ_BUILD_JOBS:-2}"

# Leak reports would drown findings in allocations that libraries keep for the process' life.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"
status=0
for t in "${targets[@]}"; do
  work="build/fuzz/corpus/$t" findings="build/fuzz/findings/$t" log="build/fuzz/logs/$t.log"
  mkdir -p "$work" "$findings" "$(dirname "$log")"
  echo "fuzz.sh: $t for ${seconds}s (log: $log)"
  # -fork=1 keeps going after a finding, so one run reports every class it meets.
  "build/fuzz/tests/fuzz/fuzz_$t" -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$findings/" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || true
  found=$(find "$findings" -type f | wc -l)
  # The last progress line: "#RUNS: cov: N ft: N corp: N exec/s N oom/timeout/crash: ...".
  stats=$(grep -E '^#[0-9]+:' "$log" | tail -n 1 | sed -E 's/^#([0-9]+):.*exec\/s ([0-9]+).*/\1 runs, \2 exec\/s/' || true)
  echo "fuzz.sh: $t: ${stats:-no progress line}, $found finding(s)"
  if [[ "$found" -gt 0 ]]; then
    status=1
    find "$findings" -type f | sed 's/^/  /'
  fi
done
exit "$status"
