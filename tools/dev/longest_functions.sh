#!/bin/bash
# The ten longest function definitions (lines from signature to closing brace) in core/,
# by Universal Ctags' end field; lambdas (__anon) excluded.
cd "${1:-.}"
ctags -R --languages=C++ --c++-kinds=f --fields=+ne --extras=-F -o - core 2>/dev/null |
  awk -F'\t' '$1 !~ /^__anon/ {
    line=""; end="";
    for (i=4;i<=NF;i++) { if ($i ~ /^line:/) line=substr($i,6); if ($i ~ /^end:/) end=substr($i,5);
      if ($i ~ /^(class|struct|namespace):/) scope=substr($i, index($i,":")+1) }
    if (line != "" && end != "") printf "%d\t%s\t%s:%s\n", end-line+1, $1, $2, line }' |
  sort -rn | head -${2:-10}
