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
#
# Hybrid rows (tensor x pipeline x data): a model of 231M parameters (784, 7 x 6144, 10: 3.5 GiB
# of P+G+Adam state, so 8 ddp ranks would need 27.6 GiB and do not fit a rank's share of a
# 24 GiB host), micro_batches 4, per rank: tp2.pp2 (4 ranks) under 1f1b and gpipe, and
# tp2.pp2.dp2 with data_parallel_sharding = zero1 (8 ranks). Columns:
#   rank        world rank (its stage is rank / (tp.dp))
#   peak_rss_MiB, report_MiB   as above, of that rank
#   arith_MiB   what the rank must hold: its stage's Linear layers sliced over the tensor group
#               (weights and column-parallel biases 1/tp, row-parallel biases whole) as P and G,
#               2 x P of Adam state (/dp with zero1), and the activations of the micro-batches in
#               flight (1f1b: pp - stage, gpipe: m): the stage's input and every layer's output
#               at full width (an upper bound: column-parallel outputs are 1/tp)
#   bound_MiB   1.10 x arith_MiB + 64 MiB, checked against peak RSS
# The hybrid rows take about 3.6 GiB of RAM (4 ranks) and 5.4 GiB (8 ranks); on 2 cores the 8
# ranks oversubscribe (time only, memory is per rank).
#   tools/bench/memory_strategies.sh [TESSERA_BINARY] [STEPS] [BATCH] [ROWS]
# (defaults build/release/bin/tessera, 4 steps, batch 16, ROWS all; ROWS = zero runs only the
# ddp and zero rows, hybrid only the hybrid ones; docs/benchmarks.md's zero3 table uses batch
# 64.)
set -euo pipefail
tessera=${1:-build/release/bin/tessera}
steps=${2:-4}
batch=${3:-16}
rows=${4:-all}
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
if [[ $rows != hybrid ]]; then
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
fi

# Hybrid rows: one line per rank, each against its own arithmetic bound.
if [[ $rows == zero ]] || ! grep -qw hybrid <<<"$available"; then exit 0; fi
hybrid_layers="784$(printf ",6144%.0s" 1 2 3 4 5 6 7),10"
echo
printf '%-26s %4s %13s %10s %11s %10s %7s\n' \
  strategy rank peak_rss_MiB arith_MiB report_MiB bound_MiB within
for run in 1f1b:none:4 gpipe:none:4 1f1b:zero1:8; do
  IFS=: read -r schedule sharding n <<<"$run"
  label="hybrid tp2.pp2 $schedule"
  [[ $n == 8 ]] && label="hybrid tp2.pp2.dp2 zero1"
  "$tessera" train --config "$work/memory.ini" -n "$n" --train.strategy=hybrid \
    --model.mlp.layers="$hybrid_layers" --strategy.hybrid.tensor_parallel=2 \
    --strategy.hybrid.pipeline_parallel=2 --strategy.hybrid.micro_batches=4 \
    --strategy.hybrid.schedule="$schedule" \
    --strategy.hybrid.data_parallel_sharding="$sharding" \
    --summary "$work/summary.json" > /dev/null 2>&1
  python3 - "$work/summary.json" "$hybrid_layers" "$label" "$schedule" "$sharding" "$n" \
    "$batch" <<'PY'
import json, sys
summary, layers, label, schedule, sharding = (json.load(open(sys.argv[1])), sys.argv[2],
                                              sys.argv[3], sys.argv[4], sys.argv[5])
world, batch = int(sys.argv[6]), int(sys.argv[7])
tp, pp, m = 2, 2, 4
dp = world // (tp * pp)
sizes = [int(x) for x in layers.split(",")]
# The model's layers: Linear, activation, Linear, ..., Linear; a uniform partition gives the
# first stages one layer more when the count does not divide (plugins/strategies/hybrid).
kinds = []
for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
    kinds.append(("linear", i, a, b))
    if i + 2 < len(sizes):
        kinds.append(("activation", i, b, b))
stages, first = [], 0
for s in range(pp):
    count = len(kinds) // pp + (1 if s < len(kinds) % pp else 0)
    stages.append(kinds[first:first + count])
    first += count
mib = 1 << 20
rows_in_flight = batch // m  # rows of one micro-batch ([train] batch_size is per replica)
for r in sorted(summary["ranks"], key=lambda r: r["rank"]):
    stage = r["rank"] // (tp * dp)
    params = 0
    activations = stages[stage][0][2]  # the stage's input, kept per micro-batch
    for kind, i, a, b in stages[stage]:
        activations += b
        if kind == "linear":  # even Linears column-parallel, odd ones row-parallel
            params += a * b // tp + (b // tp if i % 2 == 0 else b)
    in_flight = (pp - stage) if schedule == "1f1b" else m
    state = 2 * params / (dp if sharding == "zero1" else 1)
    arith = (2 * params + state) * 4 + in_flight * rows_in_flight * activations * 4
    bound = 1.10 * arith + 64 * mib
    peak = r["peak_rss_bytes"]
    report = sum(r["memory_report"].values())
    print("%-26s %4d %13.0f %10.0f %11.0f %10.0f %7s" % (
        label, r["rank"], peak / mib, arith / mib, report / mib, bound / mib,
        "yes" if peak <= bound else "NO"))
PY
done
