#!/usr/bin/env bash
# Per-rank peak RSS of ddp, zero1, zero2 and zero3 side by side against what each should hold:
# an 8-layer MLP of 50M parameters (784, 7 x 2816, 10), Adam, fp32, synthetic data (16 batches
# of BATCH samples), N = 2 and 4 worker processes over shm (so RSS is per rank). Columns:
#   state_MiB   the model state the strategy keeps: ddp P+G+A, zero1 P+G+A/N, zero2 P+(G+A)/N
#   report_MiB  the largest rank's memory_report() (params + grads + optimizer + buffers)
#   report/rss  how much of the peak RSS memory_report() accounts for
#   bound_MiB   zero2's bound 1.10 x (P + (G + A)/N) + 64 MiB, checked against peak RSS;
#               zero3's 1.10 x ((P + G + A)/N + 2 x largest unit) + 64 MiB
# zero2 runs twice: with the default two staging windows and with staging_windows=1. A strategy
# whose plugin is not built is skipped.
#   tools/bench/memory_strategies.sh [TESSERA_BINARY] [STEPS] [BATCH]
# (defaults build/release/bin/tessera, 4 steps, batch 16; docs/benchmarks.md's zero3 table
# uses batch 64.)
set -euo pipefail
tessera=${1:-build/release/bin/tessera}
steps=${2:-4}
batch=${3:-16}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
width=2816
layers="784$(printf ",$width%.0s" 1 2 3 4 5 6 7),10"

cat > "$work/memory.ini" <<INI
[runtime]
transport = shm

[train]
model = mlp
optimizer = adam
dataset = synthetic
epochs = 1
max_steps = $steps
batch_size = $batch
eval_batch_size = $batch
lr = 0.0001
seed = 1
progress = off

[model.mlp]
layers = $layers
activation = relu
threads = 1

[dataset.synthetic]
samples = $((16 * batch))
test_samples = $((2 * batch))
features = 784
classes = 10
INI

available=$("$tessera" plugins --kind strategy 2>/dev/null || true)
printf '%-16s %2s %13s %10s %11s %11s %10s %7s\n' \
  strategy N peak_rss_MiB state_MiB report_MiB report/rss bound_MiB within
for n in 2 4; do
  for run in ddp zero1 zero2 zero2:1 zero3; do
    strategy=${run%%:*}
    if ! grep -qw "$strategy" <<<"$available"; then continue; fi
    extra=()
    label=$strategy
    if [[ $run == *:1 ]]; then
      extra=(--strategy.zero2.staging_windows=1)
      label="zero2 (1 window)"
    fi
    "$tessera" train --config "$work/memory.ini" -n "$n" --train.strategy="$strategy" \
      "${extra[@]}" --summary "$work/summary.json" > /dev/null
    python3 - "$work/summary.json" "$strategy" "$n" "$layers" "$label" <<'PY'
import json, sys
summary, strategy, n, layers, label = (json.load(open(sys.argv[1])), sys.argv[2],
                                        int(sys.argv[3]), sys.argv[4], sys.argv[5])
sizes = [int(x) for x in layers.split(",")]
params = sum(a * b + b for a, b in zip(sizes, sizes[1:])) * 4  # bytes of each of P, G
mib = 1 << 20
state = {"ddp": 4 * params, "zero1": 2 * params + 2 * params / n,
         "zero2": params + 3 * params / n, "zero3": 4 * params / n}[strategy]
ranks = summary["ranks"]
worst = max(ranks, key=lambda r: r["peak_rss_bytes"])
peak = worst["peak_rss_bytes"]
report = sum(worst["memory_report"].values())
bound = 1.10 * (params + 3 * params / n) + 64 * mib
if strategy == "zero3":
    largest_unit = max(a * b + b for a, b in zip(sizes, sizes[1:])) * 4
    bound = 1.10 * (4 * params / n + 2 * largest_unit) + 64 * mib
within = ("yes" if peak <= bound else "NO") if strategy in ("zero2", "zero3") else "-"
print("%-16s %2d %13.0f %10.0f %11.0f %11.2f %10.0f %7s" % (
    label, n, peak / mib, state / mib, report / mib, report / peak, bound / mib, within))
PY
  done
done
