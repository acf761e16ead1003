#!/usr/bin/env bash
# Checks, in seconds, what tools/dev/mutants.sh needs of every mutant before it can say anything:
# each tests/mutants/*.patch has its header (a non-empty `# mutant:` line and a `# tests:` line
# with a non-empty, valid regex) and applies to the tree as it is now. The paths come from the
# patches themselves (git apply reads them), so moving a file that a mutant plants its bug in
# fails this check, naming the patch, until the patch is regenerated.
#
# Usage: check_patches.sh SOURCE_DIR [PATCH_DIR]   (PATCH_DIR: default SOURCE_DIR/tests/mutants)
# Prints one line per problem, naming the patch; exits 1 when any patch has one, 0 otherwise.
# Needs bash, grep, sed, tr and git only (git apply works in a clone and outside any repository).
set -euo pipefail

if (($# < 1 || $# > 2)); then
  echo "check_patches.sh: usage: check_patches.sh SOURCE_DIR [PATCH_DIR]" >&2
  exit 2
fi
source_dir="$(cd "$1" && pwd)"
patch_dir="$(cd "${2:-$source_dir/tests/mutants}" && pwd)"

shopt -s nullglob
patches=("$patch_dir"/*.patch)
if ((${#patches[@]} == 0)); then
  echo "check_patches.sh: no *.patch in $patch_dir: the mutation check would have nothing to run" >&2
  exit 1
fi

# The header is what comes before the first file of the diff.
header_field() { sed -n '/^--- /q; s/^# '"$2"': *//p' "$1" | head -n 1; }
# grep -E exits 2 on a malformed expression (1 when, as here, nothing matches).
valid_regex() {
  local status=0
  grep -E -- "$1" </dev/null >/dev/null 2>&1 || status=$?
  ((status != 2))
}

bad=0
for patch in "${patches[@]}"; do
  name="tests/mutants/${patch##*/}"
  [[ "$patch_dir" == "$source_dir/tests/mutants" ]] || name="$patch"
  problems=()
  if [[ -z "$(header_field "$patch" mutant)" ]]; then
    problems+=("has no '# mutant: <what the bug is>' line before its diff")
  fi
  regex="$(header_field "$patch" tests)"
  if [[ -z "$regex" ]]; then
    problems+=("has no '# tests: <ctest -R regex>' line (non-empty) before its diff")
  elif ! valid_regex "$regex"; then
    problems+=("its '# tests:' regex '$regex' is not a valid regular expression")
  fi
  if ! grep -q '^+++ b/' "$patch"; then
    problems+=("holds no file diff (expected '--- a/PATH' and '+++ b/PATH' lines)")
  # GIT_CEILING_DIRECTORIES: git apply must take the patch's paths as relative to SOURCE_DIR,
  # never to a repository found above it.
  elif ! why="$(cd "$source_dir" &&
    GIT_CEILING_DIRECTORIES="${source_dir%/*}" git apply --check "$patch" 2>&1)"; then
    why="$(printf '%s\n' "$why" | sed 's/^error: //' | tr '\n' ';' | sed 's/;$//; s/;/; /g')"
    problems+=("does not apply to this tree ($why): regenerate it against the current code")
  fi
  for problem in "${problems[@]}"; do
    echo "check_patches.sh: $name $problem"
    bad=$((bad + 1))
  done
done

if ((bad)); then
  echo "check_patches.sh: $bad problem(s) in ${#patches[@]} patches; tools/dev/mutants.sh would" \
    "report them as no-apply or no-tests (see docs/testing.md, \"Mutation check\")"
  exit 1
fi
echo "check_patches.sh: all ${#patches[@]} patches have a header and apply"
