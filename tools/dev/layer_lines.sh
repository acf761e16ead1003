#!/bin/bash
# Lines per layer of core/ (headers + sources), as docs/architecture.md's table counts them.
cd "${1:-.}"
total=0
for layer in launch elastic runtime strategy_kit transport_kit base; do
  h=$(find core/$layer/include -name '*.hpp' -o -name '*.h' | xargs cat | wc -l)
  s=$(find core/$layer/src -name '*.hpp' -o -name '*.h' -o -name '*.cpp' | xargs cat | wc -l)
  printf "%-14s %6d + %6d = %6d\n" $layer $h $s $((h+s)); total=$((total+h+s))
done
echo "total $total"
