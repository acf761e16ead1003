#!/usr/bin/env bash
# What elastic training costs when nothing fails: `[elastic] enabled = true` around ddp and zero2
# against ddp and zero2 alone, paired, on the elastic sample's job (Fashion-MNIST, MLP
# 784-256-256-10, Adam, batch 64 per worker, 3 shm workers; samples/configs/elastic.ini). Each
# round runs inner, elastic(inner) for each inner back to back, so a round's two runs see the
# same machine; prints every run's samples/s and the median of the per-round ratios
# elastic/inner, then each rank's peak RSS (median over rounds) and its difference: what the
# copies of the state and the membership cost in memory.
#
#   tools/bench/elastic_overhead.sh [--rounds 5] [--steps 300] [--epochs 1] [--inner ddp,zero2]
#                                   [--copies 1] [--copy-every 1] [--workers 3]
#                                   [--send-copies] [--build build/release]
#
# --epochs: the run's length (one epoch is 312 steps at 3 workers; --steps caps it). Longer runs
# average out the scheduling noise of a small machine. --send-copies: the copies travel over the
# side channel even between ranks of one host (share_copies_on_host = false).
#
# --workers: shm workers (3, the sample's); more workers than cores makes every rank's extra
# work (the copies) cost throughput one for one.
#
# Needs a built tessera (cmake --preset release && cmake --build --preset release).
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=5 steps=300 epochs=1 share=true inners=ddp,zero2 replicas=1 every=1 workers=3
build=build/release
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --send-copies) share=false; shift ;;
    --inner) inners=$2; shift 2 ;;
    --copies) replicas=$2; shift 2 ;;
    --copy-every) every=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "elastic_overhead.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
tessera="$build/bin/tessera"
if [[ ! -x $tessera ]]; then
  echo "elastic_overhead.sh: no $tessera; build it first (cmake --preset release &&" \
    "cmake --build --preset release)" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--config samples/configs/elastic.ini --runtime.world_size="$workers"
  --train.max_steps="$steps" --train.epochs="$epochs"
  --train.checkpoint_dir= --train.checkpoint_every=0 --train.progress=off --train.eval_every=0)
IFS=, read -r -a inner_list <<<"$inners"
for ((round = 0; round < rounds; ++round)); do
  for inner in "${inner_list[@]}"; do
    plain() {
      "$tessera" train "${common[@]}" --train.strategy="$inner" \
        --summary "$work/$inner-plain-$round.json" >/dev/null 2>"$work/err.txt" ||
        { cat "$work/err.txt" >&2; exit 1; }
    }
    elastic() {
      "$tessera" train "${common[@]}" --elastic.enabled=true --train.strategy="$inner" \
        --elastic.copies="$replicas" --elastic.copy_every="$every" \
        --elastic.share_copies_on_host="$share" \
        --summary "$work/$inner-elastic-$round.json" >/dev/null 2>"$work/err.txt" ||
        { cat "$work/err.txt" >&2; exit 1; }
    }
    # Each goes first in every other round: neither always runs on the machine the other left.
    if ((round % 2 == 0)); then plain; elastic; else elastic; plain; fi
  done
done

python3 - "$work" "$rounds" "$inners" "$steps" "$replicas" "$every" "$workers" "$epochs" "$share" <<'PY'
import json, statistics, sys
work, rounds, inners, steps, replicas, every, workers, epochs, share = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8], sys.argv[9]
load = lambda inner, kind, r: json.load(open(f"{work}/{inner}-{kind}-{r}.json"))
print(f"{rounds} rounds of {epochs} epoch(s) (at most {steps} steps), {workers} shm workers, "
      f"copies = {replicas}, copy_every = {every}, share_copies_on_host = {share}")
print("%-15s %-52s %9s %9s" % ("run", "samples/s per round", "median", "ratio"))
for inner in inners:
    plain = [load(inner, "plain", r) for r in range(rounds)]
    elastic = [load(inner, "elastic", r) for r in range(rounds)]
    ratios = [e["samples_per_s"] / p["samples_per_s"] for p, e in zip(plain, elastic)]
    for name, runs in ((inner, plain), (f"elastic({inner})", elastic)):
        rates = [x["samples_per_s"] for x in runs]
        ratio = "%.3f" % statistics.median(ratios) if runs is elastic else ""
        print("%-15s %-52s %9.0f %9s" % (name, " ".join("%.0f" % x for x in rates),
                                          statistics.median(rates), ratio))
    print("  per-round ratios elastic/inner: " + " ".join("%.3f" % x for x in ratios))
    for rank in range(len(plain[0]["ranks"])):
        rss = lambda runs: statistics.median(x["ranks"][rank]["peak_rss_bytes"] for x in runs) / 2**20
        print("  rank %d peak RSS: %s %.1f MiB, elastic(%s) %.1f MiB (+%.1f MiB)" % (
            rank, inner, rss(plain), inner, rss(elastic), rss(elastic) - rss(plain)))
PY
