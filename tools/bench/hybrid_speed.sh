#!/usr/bin/env bash
# hybrid (tensor x pipeline x data) against ddp on the same global batch, over shm processes:
# MLP 784, 6 x 1024, 10 (the shape of samples/configs/hybrid.ini), Adam, fp32, synthetic data,
# [model.mlp] threads = 1 per rank.
#
#   tools/bench/hybrid_speed.sh [--steps 10] [--warmup 3] [--repeats 3] [--batch 256]
#                               [--recompute-batch 1024] [--build build/ci]
#
# Rows, each run --repeats times in turn (interleaved, so every row sees the same machine load):
#   ddp n=2            2 ranks x batch/2 (the reference of every n=2 row)
#   pp2 1f1b / gpipe   pipeline_parallel = 2, micro_batches = 8, 2 ranks x batch (dp = 1);
#                      the uniform partition gives stage 0 four Linears (3.9 M parameters) and
#                      stage 1 three (2.1 M), so stage 1 waits for stage 0 beyond the theory:
#   pp2 1f1b balanced  the same with partition = balanced (stages of near-equal estimated cost;
#                      784 inputs make the Linears unequal, so the stages still differ by ~9 %)
#   equal stages       MLP 1024, 8 x 1024 (1024 classes): eight equal Linears, four per stage,
#                      the case the theory describes; ddp n=2, pp2 1f1b and pp2 gpipe on it
#   tp2                tensor_parallel = 2, 2 ranks x batch (dp = 1)
#   ddp n=4, tp2.pp2   4 ranks on this machine's cores: on 2 cores they oversubscribe (two
#                      runnable ranks per core), so these rows measure time-sharing as much as
#                      the schedule; shown because the issue asks for them
#   recompute          pp2 m=8 (1f1b and gpipe) at --recompute-batch, recompute none and full:
#                      the time ratio full/none and the largest rank's peak RSS of each
# samples/s counts --steps steps after --warmup untimed ones (rank 0's metrics lines); the table
# shows the median and every repeat and the median of the per-repeat ratios to ddp (the runs of
# one repeat are back to back: their ratio sees the least drift in load). The bubble is what
# the plugin prints at each evaluation ("hybrid: pipeline bubble over N steps ...: measured
# X %"): runs evaluate every --warmup steps, so the first line covers the warm-up and is left
# out; the rest, weighted by their steps, cover the timed steps. The median of the repeats is
# shown against the theory (pp-1)/(m+pp-1). Targets (issue 14): bubble within 5 points of
# theory, recompute=full at most 1.4 x the time of none. The load average is printed before and
# after.
set -euo pipefail
cd "$(dirname "$0")/../.."

steps=10 warmup=3 repeats=3 batch=256 recompute_batch=1024 build=build/ci
while (($#)); do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --recompute-batch) recompute_batch=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "hybrid_speed.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
tessera=$build/bin/tessera
[[ -x $tessera ]] || { echo "hybrid_speed.sh: no $tessera (build it: cmake --build --preset ci)" >&2; exit 2; }
if ! "$tessera" plugins --kind strategy 2>/dev/null | grep -qw hybrid; then
  echo "hybrid_speed.sh: $tessera finds no hybrid strategy plugin (build tessera_strategy_hybrid)" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.txt

((warmup >= 1)) || { echo "hybrid_speed.sh: --warmup must be at least 1" >&2; exit 2; }
common=(--runtime.transport=shm --train.dataset=synthetic --dataset.synthetic.test_samples=64
  --model.mlp.threads=1 --train.optimizer=adam --train.lr=0.0001 --train.seed=1
  --train.progress=off --train.max_steps=$((warmup + steps)) --train.eval_every=$warmup)
# The shape of samples/configs/hybrid.ini, and one whose eight Linears are all equal.
mlp=(--dataset.synthetic.features=784 --dataset.synthetic.classes=10
  --model.mlp.layers=784,1024,1024,1024,1024,1024,1024,10)
equal=(--dataset.synthetic.features=1024 --dataset.synthetic.classes=1024
  --model.mlp.layers=1024,1024,1024,1024,1024,1024,1024,1024,1024)

# label, ranks, per-replica batch, tessera flags...: appends "label rate bubble theory rss_MiB".
run() {
  local label=$1 ranks=$2 per_replica=$3
  shift 3
  local metrics=$work/$label-$rep.jsonl
  "$tessera" train -n "$ranks" "${common[@]}" --train.batch_size="$per_replica" \
    --dataset.synthetic.samples=$(((warmup + steps) * per_replica * ranks)) \
    --train.metrics_file="$metrics" --summary "$work/summary.json" "$@" >"$work/out.txt" 2>&1 ||
    { cat "$work/out.txt" >&2; exit 1; }
  python3 - "$metrics" "$warmup" "$steps" "$work/out.txt" "$work/summary.json" "$label" <<'PY' >>"$results"
import json, re, sys
path, warmup, steps, out, summary, label = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
rows = [json.loads(line) for line in open(path) if '"loss"' in line]
if len(rows) < warmup + steps:
    sys.exit(f"{path}: {len(rows)} steps, expected {warmup + steps}")
timed = rows[warmup:warmup + steps]
start = rows[warmup - 1]["time_s"] if warmup > 0 else 0.0
rate = sum(r["samples"] for r in timed) / (timed[-1]["time_s"] - start)
lines = re.findall(r"pipeline bubble over ([0-9]+) steps.*?: measured ([0-9.]+) %.*= ([0-9.]+) %",
                   open(out).read())
timed_lines = lines[1:]  # the first covers the warm-up steps
if timed_lines:
    counted = sum(int(n) for n, _, _ in timed_lines)
    bubble = f"{sum(int(n) * float(b) for n, b, _ in timed_lines) / counted:.2f}"
    theory = timed_lines[0][2]
else:
    bubble, theory = "-", "-"
rss = max(r["peak_rss_bytes"] for r in json.load(open(summary))["ranks"]) / (1 << 20)
print(label, rate, bubble, theory, f"{rss:.1f}")
PY
}

hybrid=(--train.strategy=hybrid --strategy.hybrid.micro_batches=8)
pp2=("${hybrid[@]}" --strategy.hybrid.pipeline_parallel=2)
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$tessera, global batch $batch, $steps timed steps after $warmup, $repeats repeats"
for ((rep = 1; rep <= repeats; ++rep)); do
  run ddp2 2 $((batch / 2)) "${mlp[@]}" --train.strategy=ddp
  run pp2_1f1b 2 "$batch" "${mlp[@]}" "${pp2[@]}" --strategy.hybrid.schedule=1f1b
  run pp2_gpipe 2 "$batch" "${mlp[@]}" "${pp2[@]}" --strategy.hybrid.schedule=gpipe
  run pp2_balanced 2 "$batch" "${mlp[@]}" "${pp2[@]}" --strategy.hybrid.schedule=1f1b \
    --strategy.hybrid.partition=balanced
  run eq_ddp2 2 $((batch / 2)) "${equal[@]}" --train.strategy=ddp
  run eq_1f1b 2 "$batch" "${equal[@]}" "${pp2[@]}" --strategy.hybrid.schedule=1f1b
  run eq_gpipe 2 "$batch" "${equal[@]}" "${pp2[@]}" --strategy.hybrid.schedule=gpipe
  run tp2 2 "$batch" "${mlp[@]}" --train.strategy=hybrid --strategy.hybrid.tensor_parallel=2
  run ddp4 4 $((batch / 4)) "${mlp[@]}" --train.strategy=ddp
  run tp2pp2 4 "$batch" "${mlp[@]}" "${pp2[@]}" --strategy.hybrid.tensor_parallel=2
  for schedule in 1f1b gpipe; do
    for recompute in none full; do
      run "rc_${schedule}_$recompute" 2 "$recompute_batch" "${mlp[@]}" "${pp2[@]}" \
        --strategy.hybrid.schedule=$schedule --strategy.hybrid.recompute=$recompute
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$results" "$batch" "$recompute_batch" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, rate, bubble, theory, rss = line.split()
    rows.setdefault(label, []).append((float(rate), bubble, theory, float(rss)))
batch, recompute_batch = sys.argv[2], sys.argv[3]
med = statistics.median

def rates(label):
    return [r[0] for r in rows[label]]

def ratio(a, b):  # median of the per-repeat ratios a/b
    return med([x / y for x, y in zip(rates(a), rates(b))])

print(f"\nglobal batch {batch}; the n=4 rows oversubscribe 2 cores (4 ranks, 1 thread each)")
print(f"| {'run':<42} | {'samples/s':>9} | {'each repeat':<17} | {'vs ddp':>6} | "
      f"{'bubble %':>8} | {'theory %':>8} | {'gap':>5}")
print(f"|{'-' * 44}|{'-' * 11}|{'-' * 19}|{'-' * 8}|{'-' * 10}|{'-' * 10}|{'-' * 7}")
names = [("ddp2", "ddp, 2 ranks", "ddp2"),
         ("pp2_1f1b", "hybrid pp2 m8 1f1b, 2 ranks", "ddp2"),
         ("pp2_gpipe", "hybrid pp2 m8 gpipe, 2 ranks", "ddp2"),
         ("pp2_balanced", "hybrid pp2 m8 1f1b balanced, 2 ranks", "ddp2"),
         ("eq_ddp2", "equal stages: ddp, 2 ranks", "eq_ddp2"),
         ("eq_1f1b", "equal stages: hybrid pp2 m8 1f1b", "eq_ddp2"),
         ("eq_gpipe", "equal stages: hybrid pp2 m8 gpipe", "eq_ddp2"),
         ("tp2", "hybrid tp2, 2 ranks", "ddp2"),
         ("ddp4", "ddp, 4 ranks (oversubscribed)", "ddp4"),
         ("tp2pp2", "hybrid tp2.pp2 m8 1f1b, 4 ranks (oversub.)", "ddp4")]
for key, name, reference in names:
    bubbles = [float(r[1]) for r in rows[key] if r[1] != "-"]
    bubble = f"{med(bubbles):.1f}" if bubbles else "-"
    theory = rows[key][0][2]
    gap = f"{med(bubbles) - float(theory):+.1f}" if bubbles else "-"
    each = " ".join(f"{r:.0f}" for r in rates(key))
    print(f"| {name:<42} | {med(rates(key)):>9.0f} | {each:<17} | {ratio(key, reference):>6.2f} | "
          f"{bubble:>8} | {theory:>8} | {gap:>5}")

print(f"\nrecompute = full against none, hybrid pp2 m8, 2 ranks, global batch {recompute_batch}")
print(f"| {'schedule':<8} | {'samples/s none':>14} | {'samples/s full':>14} | {'time full/none':>14} | "
      f"{'peak RSS none MiB':>17} | {'peak RSS full MiB':>17} | {'saved MiB':>9}")
print(f"|{'-' * 10}|{'-' * 16}|{'-' * 16}|{'-' * 16}|{'-' * 19}|{'-' * 19}|{'-' * 11}")
for schedule in ("1f1b", "gpipe"):
    none, full = f"rc_{schedule}_none", f"rc_{schedule}_full"
    rss_none = med([r[3] for r in rows[none]])
    rss_full = med([r[3] for r in rows[full]])
    print(f"| {schedule:<8} | {med(rates(none)):>14.0f} | {med(rates(full)):>14.0f} | "
          f"{ratio(none, full):>14.2f} | {rss_none:>17.1f} | {rss_full:>17.1f} | "
          f"{rss_none - rss_full:>9.1f}")
print("\ntime full/none: median per repeat of samples/s(none) / samples/s(full); target <= 1.4")
print("bubble gap: measured - theory in percentage points; target within 5")
PY
