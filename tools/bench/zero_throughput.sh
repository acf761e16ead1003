#!/usr/bin/env bash
# ddp, zero1 and zero2 throughput side by side at world 2 on the ddp throughput benchmark (MLP
# 784-1024-1024-10, batch 256 per rank, SGD with momentum, fp32, synthetic data, shm). Runs
# interleave (ddp, zero1, zero2, ddp, ...) so machine load hits all alike; prints each run's
# samples/s, the medians and zero's ratio to ddp.
#   tools/bench/zero_throughput.sh [TESSERA_BINARY] [STEPS] [REPEATS]
set -euo pipefail
tessera=${1:-build/release/bin/tessera}
steps=${2:-150}
repeats=${3:-3}
config=$(dirname "$0")/ddp_throughput.ini
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for ((i = 0; i < repeats; ++i)); do
  for strategy in ddp zero1 zero2; do
    "$tessera" train --config "$config" -n 2 --train.strategy="$strategy" \
      --train.max_steps="$steps" --summary "$work/$strategy-$i.json" > /dev/null
  done
done
python3 - "$work" "$repeats" <<'PY'
import json, statistics, sys
work, repeats = sys.argv[1], int(sys.argv[2])
rates = {s: [json.load(open(f"{work}/{s}-{i}.json"))["samples_per_s"] for i in range(repeats)]
         for s in ("ddp", "zero1", "zero2")}
ddp = statistics.median(rates["ddp"])
print("%-8s %-40s %12s %9s" % ("strategy", "samples/s per run", "median", "vs ddp"))
for s, r in rates.items():
    m = statistics.median(r)
    print("%-8s %-40s %12.0f %9.3f" % (s, " ".join("%.0f" % x for x in r), m, m / ddp))
PY
