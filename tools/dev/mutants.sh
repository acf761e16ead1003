#!/usr/bin/env bash
# Mutation check: does the test suite notice a plausible one-line bug?
#
# Each tests/mutants/*.patch is a unified diff (paths a/... b/..., applied with git apply, which
# takes no fuzz) that plants one bug in a central place, with a header naming it and the tests
# that must catch it:
#
#   # mutant: <what the bug is>
#   # tests: <ctest -R regex>
#
# The script copies the working tree (tracked and untracked-but-not-ignored files) to a
# scratch folder, builds it once with the `ci` preset and checks that the selected tests pass
# there. Then, for each mutant in turn, it applies the patch, rebuilds incrementally, runs the
# mutant's tests (or, with --full, the whole suite) and reverts the patch. A mutant is
# "killed" when a test fails (the run stops at the first failure), "survived" when every test
# passes. The table goes to stdout; the
# exit status is 1 when any mutant survived or could not be checked (it did not apply, did not
# build, or its regex selected no test), 0 when all were killed.
#
# Usage: tools/dev/mutants.sh [--full] [--jobs N] [PATCH...]
#   --full     run the whole suite for every mutant instead of its `# tests:` regex
#   --jobs N   parallel build and test jobs (default 2)
#   PATCH...   only these patches (default: every tests/mutants/*.patch)
# Environment: TESSERA_MUTANTS_DIR, the scratch folder (default: a sibling of the tree,
# <parent>/.mutants-<tree name>, the same depth as the tree so the shared ccache, with
# CCACHE_BASEDIR set, hits for every unmutated file). Not part of CI: it takes minutes per
# mutant on two cores. See docs/testing.md, "Mutation check".
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
full=0
jobs=2
patches=()
while (($#)); do
  case "$1" in
    --full) full=1 ;;
    --jobs) jobs="$2"; shift ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) echo "mutants.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) patches+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")") ;;
  esac
  shift
done
if ((${#patches[@]} == 0)); then
  mapfile -t patches < <(ls "$repo"/tests/mutants/*.patch)
fi
if ((${#patches[@]} == 0)); then
  echo "mutants.sh: no patches in $repo/tests/mutants" >&2
  exit 2
fi

# shellcheck disable=SC1091
[[ -f /root/.ccache_env ]] && source /root/.ccache_env
scratch="${TESSERA_MUTANTS_DIR:-$(dirname "$repo")/.mutants-$(basename "$repo")}"
mkdir -p "$scratch"
log_dir="$scratch/logs"
mkdir -p "$log_dir"

header() { sed -n "s/^# $2: //p" "$1" | head -n 1; }
# git apply outside any repository (GIT_CEILING_DIRECTORIES keeps it from finding one above the
# scratch tree, whose paths it would then take as relative to that repository's top): the same
# tool and the same strictness as the suite's check that every patch applies
# (tests/mutants/check_patches.sh).
apply() { GIT_CEILING_DIRECTORIES="$scratch" git apply "$@"; }

# Copy the tree, writing only files whose content differs: unchanged files keep their mtimes,
# so the scratch build stays incremental from one run to the next, and a file a previous,
# interrupted run left mutated is rewritten with a new mtime, so it is rebuilt.
mkdir -p "$scratch/tree"
while IFS= read -r -d '' file; do
  [[ -f "$repo/$file" ]] || continue
  if ! cmp -s "$repo/$file" "$scratch/tree/$file"; then
    mkdir -p "$scratch/tree/$(dirname "$file")"
    cp "$repo/$file" "$scratch/tree/$file"
  fi
done < <(cd "$repo" && git ls-files -z --cached --others --exclude-standard)
cd "$scratch/tree"
# A mutant in libtessera then relinks libtessera alone: executables load the new library at
# run time instead of being relinked against it (LINK_DEPENDS_NO_SHARED), which is most of an
# incremental build's time on a small machine.
if ! grep -q '^CMAKE_LINK_DEPENDS_NO_SHARED:BOOL=ON' build/ci/CMakeCache.txt 2>/dev/null; then
  cmake --preset ci -DCMAKE_LINK_DEPENDS_NO_SHARED=ON >"$log_dir/configure.log" 2>&1 ||
    { echo "mutants.sh: configure failed, see $log_dir/configure.log" >&2; exit 2; }
fi

build() { cmake --build --preset ci -- -j"$jobs" >"$1" 2>&1; }
run_tests() {  # $1 log, $2 regex ('' = all), $3 "stop" to stop at the first failure
  local args=(--preset ci -j"$jobs" --timeout 300 --no-tests=error)
  [[ "${3:-}" == stop ]] && args+=(--stop-on-failure)
  [[ -n "$2" ]] && args+=(-R "$2")
  ctest "${args[@]}" >"$1" 2>&1
}

# Baseline: the unmutated tree must build and pass the tests the mutants will run, or a
# "killed" would mean nothing.
echo "mutants.sh: building the unmutated tree in $scratch/tree" >&2
build "$log_dir/baseline-build.log" ||
  { echo "mutants.sh: the unmutated tree does not build, see $log_dir/baseline-build.log" >&2; exit 2; }
if ((full)); then
  baseline_regex=''
else
  baseline_regex="$(for p in "${patches[@]}"; do header "$p" tests; done | paste -sd'|')"
fi
echo "mutants.sh: baseline tests" >&2
run_tests "$log_dir/baseline-tests.log" "$baseline_regex" ||
  { echo "mutants.sh: tests fail without any mutant, see $log_dir/baseline-tests.log" >&2; exit 2; }

printf '%-3s %-44s %-9s %5s  %s\n' '#' mutant result secs 'first failing tests'
killed=0
bad=0
n=0
for patch in "${patches[@]}"; do
  n=$((n + 1))
  name="$(basename "$patch" .patch)"
  regex="$(header "$patch" tests)"
  ((full)) && regex=''
  start=$SECONDS
  result=''
  detail=''
  if [[ -z "$regex" ]] && ((!full)); then
    result='no-tests'
    detail='the patch has no "# tests:" line'
  elif ! why="$(apply --check "$patch" 2>&1)"; then
    result='no-apply'
    detail="$(printf '%s\n' "$why" | head -n 1)"
  else
    apply "$patch"
    if ! build "$log_dir/$name-build.log"; then
      result='no-build'
      detail="see $log_dir/$name-build.log"
    elif run_tests "$log_dir/$name-tests.log" "$regex" stop; then
      result='SURVIVED'
    elif grep -q 'No tests were found' "$log_dir/$name-tests.log"; then
      result='no-tests'
      detail="regex '$regex' selects no test"
    else
      result='killed'
      detail="$(sed -n '/The following tests FAILED/,$p' "$log_dir/$name-tests.log" |
        sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\).*/\1/p' | head -n 2 | paste -sd' ')"
    fi
    apply -R "$patch"
  fi
  case "$result" in
    killed) killed=$((killed + 1)) ;;
    *) bad=$((bad + 1)) ;;
  esac
  printf '%-3s %-44s %-9s %5s  %s\n' "$n" "$name" "$result" "$((SECONDS - start))" "$detail"
done
echo "mutants.sh: $killed of $n killed; logs in $log_dir" >&2
# Leave the scratch build matching the unmutated tree for the next run.
build "$log_dir/restore-build.log" || true
((bad == 0))
