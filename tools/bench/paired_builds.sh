#!/usr/bin/env bash
# Two builds of tessera side by side: the throughput of ddp, zero1, zero2 and zero3 at world 2
# on the ddp throughput benchmark (MLP 784-1024-1024-10, batch 256 per rank, SGD with momentum,
# fp32, synthetic data, shm), each strategy run with build A then build B, REPEATS times, so
# that the machine's load falls on both alike. Prints every run's samples/s, the medians and
# B's median over A's. Use it to show that a change to the core costs nothing:
#   tools/bench/paired_builds.sh OLD_TESSERA NEW_TESSERA [STEPS] [REPEATS]
# (each TESSERA is a bin/tessera of a build; defaults: 150 steps, 5 repeats)
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n '2,9p' "$0" >&2; exit 2; }
a=$1 b=$2 steps=${3:-150} repeats=${4:-5}
config=$(dirname "$0")/ddp_throughput.ini
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rate() { sed -n 's/.*"samples_per_s": *\([0-9.e+]*\).*/\1/p' "$1"; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
printf '%-8s %-6s %-50s %10s\n' strategy build "samples/s per run" median
for strategy in ddp zero1 zero2 zero3; do
  for ((i = 0; i < repeats; ++i)); do
    for side in a b; do
      bin=$a; [[ $side == b ]] && bin=$b
      "$bin" train --config "$config" -n 2 --train.strategy="$strategy" \
        --train.max_steps="$steps" --summary "$work/$strategy-$side-$i.json" >/dev/null
      rate "$work/$strategy-$side-$i.json" >>"$work/$strategy-$side"
    done
  done
  ma=$(median <"$work/$strategy-a") mb=$(median <"$work/$strategy-b")
  printf '%-8s %-6s %-50s %10.0f\n' "$strategy" A "$(tr '\n' ' ' <"$work/$strategy-a")" "$ma"
  printf '%-8s %-6s %-50s %10.0f   B/A %.3f\n' "$strategy" B "$(tr '\n' ' ' <"$work/$strategy-b")" \
    "$mb" "$(awk -v a="$ma" -v b="$mb" 'BEGIN {print b / a}')"
done
