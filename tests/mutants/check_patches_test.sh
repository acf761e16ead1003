#!/usr/bin/env bash
# check_patches.sh against a tree and patches made up here: it must name every broken patch with
# its reason and exit 1, and pass a folder of good patches. Without this, a check that always
# passed would look the same as one that found nothing wrong.
set -euo pipefail

here=.
[[ "${BASH_SOURCE[0]}" == */* ]] && here="${BASH_SOURCE[0]%/*}"
check="$(cd "$here" && pwd)/check_patches.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tree/src" "$work/good" "$work/bad"
printf 'int scale() {\n  return 2;\n}\n' >"$work/tree/src/scale.cpp"

diff_body() {  # $1: the file's path, $2: the line the hunk expects, $3: what it becomes
  printf -- '--- a/%s\n+++ b/%s\n@@ -1,3 +1,3 @@\n int scale() {\n-%s\n+%s\n }\n' "$1" "$1" "$2" "$3"
}
{ printf '# mutant: scale one too large\n# tests: Scale\n'
  diff_body src/scale.cpp '  return 2;' '  return 3;'; } >"$work/good/01-scale-plus-one.patch"
cp "$work/good/01-scale-plus-one.patch" "$work/bad/"
{ printf '# mutant: the file moved\n# tests: Scale\n'
  diff_body src/old/scale.cpp '  return 2;' '  return 3;'; } >"$work/bad/02-moved-file.patch"
{ printf '# mutant: the code changed under it\n# tests: Scale\n'
  diff_body src/scale.cpp '  return 4;' '  return 5;'; } >"$work/bad/03-stale-context.patch"
{ printf '# mutant: no tests named\n'
  diff_body src/scale.cpp '  return 2;' '  return 3;'; } >"$work/bad/04-no-tests-line.patch"
{ printf '# mutant: empty regex\n# tests: \n'
  diff_body src/scale.cpp '  return 2;' '  return 3;'; } >"$work/bad/05-empty-tests.patch"
{ printf '# mutant: broken regex\n# tests: Scale(\n'
  diff_body src/scale.cpp '  return 2;' '  return 3;'; } >"$work/bad/06-bad-regex.patch"
{ printf '# tests: Scale\n'
  diff_body src/scale.cpp '  return 2;' '  return 3;'; } >"$work/bad/07-no-mutant-line.patch"
printf '# mutant: a header alone\n# tests: Scale\n' >"$work/bad/08-no-diff.patch"

failures=0
fail() { echo "check_patches_test: $*" >&2; failures=$((failures + 1)); }
expect_line() {  # $1 output, $2 patch, $3 what its line must say
  grep -F -- "$2" <<<"$1" | grep -qF -- "$3" || fail "no line names $2 with '$3'; output was:
$1"
}

status=0
out="$(bash "$check" "$work/tree" "$work/good")" || status=$?
((status == 0)) || fail "good patches: exit $status, expected 0; output was:
$out"

status=0
out="$(bash "$check" "$work/tree" "$work/bad")" || status=$?
((status == 1)) || fail "broken patches: exit $status, expected 1"
expect_line "$out" 02-moved-file.patch "does not apply to this tree (src/old/scale.cpp: No such file"
expect_line "$out" 03-stale-context.patch "does not apply to this tree (patch failed: src/scale.cpp:1"
expect_line "$out" 04-no-tests-line.patch "has no '# tests: <ctest -R regex>' line"
expect_line "$out" 05-empty-tests.patch "has no '# tests: <ctest -R regex>' line"
expect_line "$out" 06-bad-regex.patch "regex 'Scale(' is not a valid regular expression"
expect_line "$out" 07-no-mutant-line.patch "has no '# mutant: <what the bug is>' line"
expect_line "$out" 08-no-diff.patch "holds no file diff"
if grep -qF 01-scale-plus-one.patch <<<"$out"; then fail "the good patch is named: $out"; fi
# The tree is left as it was: the check applies nothing.
[[ "$(sed -n 2p "$work/tree/src/scale.cpp")" == '  return 2;' ]] || fail "the tree was changed"

status=0
out="$(bash "$check" "$work/tree" "$work/tree/src" 2>&1)" || status=$?
((status == 1)) || fail "a folder without patches: exit $status, expected 1"
expect_line "$out" "no *.patch in" "the mutation check would have nothing to run"

((failures == 0)) || exit 1
echo "check_patches_test: check_patches.sh names each of 7 broken patches and passes the good one"
