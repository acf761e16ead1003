#!/usr/bin/env bash
# Per-rank peak RSS of ddp, zero2 and zero3 side by side: an 8-layer MLP of 50M parameters
# (784, 7 x 2816, 10), Adam, fp32, synthetic data, N = 2 and 4 worker processes over shm. For
# zero3 it checks the issue's bound: peak <= 1.10 x ((params + grads + Adam state) / N
# + 2 x the largest unit) + 64 MiB. A strategy whose plugin is not built is skipped.
#   tools/bench/zero3_memory.sh [TESSERA_BINARY] [STEPS]
set -euo pipefail
tessera=${1:-build/release/bin/tessera}
steps=${2:-4}
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
batch_size = 64
eval_batch_size = 64
lr = 0.0001
seed = 1
progress = off

[model.mlp]
layers = $layers
activation = relu
threads = 1

[dataset.synthetic]
samples = 1024
test_samples = 128
features = 784
classes = 10
INI

available=$("$tessera" plugins --kind strategy 2>/dev/null || true)
printf '%-8s %2s %16s %16s %14s %12s\n' strategy N peak_rss_MiB report_MiB bound_MiB within
for n in 2 4; do
  for strategy in ddp zero2 zero3; do
    if ! grep -qw "$strategy" <<< "$available"; then continue; fi
    "$tessera" train --config "$work/memory.ini" -n "$n" --train.strategy="$strategy" \
      --summary "$work/$strategy-$n.json" > /dev/null
    python3 - "$work/$strategy-$n.json" "$strategy" "$n" "$layers" <<'PY'
import json, sys
summary, strategy, n, layers = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), sys.argv[4]
sizes = [int(x) for x in layers.split(",")]
units = [a * b + b for a, b in zip(sizes, sizes[1:])]
params = sum(units)
mib = 1 << 20
peak = max(r["peak_rss_bytes"] for r in summary["ranks"])
report = max(sum(r["memory_report"].values()) for r in summary["ranks"])
bound, within = "", ""
if strategy == "zero3":
    b = 1.10 * (params * 4 * 4 / n + 2 * max(units) * 4) + 64 * mib
    bound, within = "%.0f" % (b / mib), "yes" if peak <= b else "NO"
print("%-8s %2d %16.0f %16.0f %14s %12s" % (strategy, n, peak / mib, report / mib, bound, within))
PY
  done
done
